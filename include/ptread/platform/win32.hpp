// ptread — the few Windows calls the file layer makes (built where _WIN32 is defined; tested
// with MinGW-w64 under Wine).
//
// <windows.h> is not included: it defines macros (min, max, near, far, ERROR, ...) that break
// ordinary C++ in the files that include ptread. The calls are declared here instead, as
// <windows.h> declares them (same types, dllimport, __stdcall), so a program that includes
// both compiles; only calls whose arguments are plain types or pointers to the SDK's own
// struct tags are used. Paths are UTF-8 and handed to the wide-character calls.
#pragma once

#include "../config.hpp"

#if defined(_WIN32)

#include <cstdarg>
#include <cstdint>
#include <string>

struct _SECURITY_ATTRIBUTES;
struct _OVERLAPPED;
union _ULARGE_INTEGER;

extern "C" {
__declspec(dllimport) unsigned long __stdcall GetLastError(void);
__declspec(dllimport) void __stdcall SetLastError(unsigned long dwErrCode);
__declspec(dllimport) int __stdcall CloseHandle(void* hObject);
__declspec(dllimport) void* __stdcall CreateFileW(const wchar_t* lpFileName, unsigned long dwDesiredAccess,
                                                  unsigned long dwShareMode, _SECURITY_ATTRIBUTES* lpSecurityAttributes,
                                                  unsigned long dwCreationDisposition,
                                                  unsigned long dwFlagsAndAttributes, void* hTemplateFile);
__declspec(dllimport) unsigned long __stdcall GetFileAttributesW(const wchar_t* lpFileName);
__declspec(dllimport) unsigned long __stdcall GetFileType(void* hFile);
__declspec(dllimport) unsigned long __stdcall GetFileSize(void* hFile, unsigned long* lpFileSizeHigh);
__declspec(dllimport) void* __stdcall CreateFileMappingW(void* hFile, _SECURITY_ATTRIBUTES* lpFileMappingAttributes,
                                                         unsigned long flProtect, unsigned long dwMaximumSizeHigh,
                                                         unsigned long dwMaximumSizeLow, const wchar_t* lpName);
#if defined(_WIN64)
__declspec(dllimport) void* __stdcall MapViewOfFile(void* hFileMappingObject, unsigned long dwDesiredAccess,
                                                    unsigned long dwFileOffsetHigh, unsigned long dwFileOffsetLow,
                                                    unsigned long long dwNumberOfBytesToMap);
#else
__declspec(dllimport) void* __stdcall MapViewOfFile(void* hFileMappingObject, unsigned long dwDesiredAccess,
                                                    unsigned long dwFileOffsetHigh, unsigned long dwFileOffsetLow,
                                                    unsigned long dwNumberOfBytesToMap);
#endif
__declspec(dllimport) int __stdcall UnmapViewOfFile(const void* lpBaseAddress);
__declspec(dllimport) unsigned long __stdcall SetFilePointer(void* hFile, long lDistanceToMove,
                                                             long* lpDistanceToMoveHigh, unsigned long dwMoveMethod);
__declspec(dllimport) int __stdcall ReadFile(void* hFile, void* lpBuffer, unsigned long nNumberOfBytesToRead,
                                             unsigned long* lpNumberOfBytesRead, _OVERLAPPED* lpOverlapped);
__declspec(dllimport) int __stdcall FlushFileBuffers(void* hFile);
__declspec(dllimport) int __stdcall MoveFileExW(const wchar_t* lpExistingFileName, const wchar_t* lpNewFileName,
                                                unsigned long dwFlags);
__declspec(dllimport) int __stdcall GetDiskFreeSpaceExW(const wchar_t* lpDirectoryName,
                                                        _ULARGE_INTEGER* lpFreeBytesAvailableToCaller,
                                                        _ULARGE_INTEGER* lpTotalNumberOfBytes,
                                                        _ULARGE_INTEGER* lpTotalNumberOfFreeBytes);
__declspec(dllimport) int __stdcall MultiByteToWideChar(unsigned int CodePage, unsigned long dwFlags,
                                                        const char* lpMultiByteStr, int cbMultiByte,
                                                        wchar_t* lpWideCharStr, int cchWideChar);
__declspec(dllimport) unsigned long __stdcall FormatMessageA(unsigned long dwFlags, const void* lpSource,
                                                             unsigned long dwMessageId, unsigned long dwLanguageId,
                                                             char* lpBuffer, unsigned long nSize, va_list* Arguments);
}

namespace ptread {
namespace detail {
namespace win32 {

// The SDK's values of the constants used (winnt.h, fileapi.h, winbase.h, winerror.h).
inline void* invalid_handle() noexcept { return reinterpret_cast<void*>(static_cast<intptr_t>(-1)); }
constexpr unsigned long kGenericRead = 0x80000000ul;
constexpr unsigned long kShareReadWriteDelete = 0x1ul | 0x2ul | 0x4ul;
constexpr unsigned long kOpenExisting = 3;
constexpr unsigned long kAttributeNormal = 0x80;
constexpr unsigned long kAttributeDirectory = 0x10;
constexpr unsigned long kInvalidAttributes = 0xFFFFFFFFul;
constexpr unsigned long kFileTypeDisk = 1;
constexpr unsigned long kInvalidFileSize = 0xFFFFFFFFul;
constexpr unsigned long kPageReadonly = 0x02;
constexpr unsigned long kFileMapRead = 0x04;
constexpr unsigned long kFileBegin = 0;
constexpr unsigned long kInvalidSetFilePointer = 0xFFFFFFFFul;
constexpr unsigned long kMoveReplaceExisting = 0x1, kMoveWriteThrough = 0x8;
constexpr unsigned int kCodePageUtf8 = 65001;
constexpr unsigned long kUtf8Strict = 0x8;  // MB_ERR_INVALID_CHARS
constexpr unsigned long kFormatFromSystem = 0x1000, kFormatIgnoreInserts = 0x200;
constexpr unsigned long kNoError = 0, kErrorInvalidFunction = 1, kErrorHandleEof = 38, kErrorInvalidHandle = 6;

}  // namespace win32

// A UTF-8 path as the wide string the *W calls take; empty when it is not valid UTF-8 (or
// is empty), which the callers report as a path that cannot be opened.
inline std::wstring win32_wide(const std::string& utf8) {
  if (utf8.empty() || utf8.size() > 0x7fffffff) return {};
  const int n = static_cast<int>(utf8.size());
  const int wn = ::MultiByteToWideChar(win32::kCodePageUtf8, win32::kUtf8Strict, utf8.data(), n, nullptr, 0);
  if (wn <= 0) return {};
  std::wstring w(static_cast<size_t>(wn), L'\0');
  if (::MultiByteToWideChar(win32::kCodePageUtf8, win32::kUtf8Strict, utf8.data(), n, &w[0], wn) != wn) return {};
  return w;
}

// The system's text for an error code from GetLastError(), with its number.
inline std::string win32_message(unsigned long err) {
  char buf[256];
  unsigned long n = ::FormatMessageA(win32::kFormatFromSystem | win32::kFormatIgnoreInserts, nullptr, err, 0, buf,
                                     sizeof buf, nullptr);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '.')) --n;
  return (n > 0 ? std::string(buf, n) : std::string("system error")) + " (" + std::to_string(err) + ")";
}

}  // namespace detail
}  // namespace ptread

#endif  // _WIN32
