// What the tests need of the system, on POSIX and on Windows (MinGW-w64, run under Wine by
// tools/windows.sh): the process id, a folder for temporary files, making a folder, a file
// written in pieces with holes between them, the disk a file takes, removing a file or folder.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#if defined(_WIN32)
#include <direct.h>   // _mkdir, _rmdir
#include <sys/stat.h>  // _stati64
#include <io.h>       // _chsize_s
#include <process.h>  // _getpid
#else
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace ptread_test {

inline int test_pid() {
#if defined(_WIN32)
  return _getpid();
#else
  return static_cast<int>(::getpid());
#endif
}

// $TMPDIR, else (Windows) %TEMP% or %TMP%, else /tmp.
inline std::string temp_dir() {
  for (const char* name : {"TMPDIR", "TEMP", "TMP"}) {
    const char* dir = std::getenv(name);
    if (dir != nullptr && *dir != '\0') return dir;
  }
  return "/tmp";
}

inline bool make_dir(const std::string& path) {
#if defined(_WIN32)
  return ::_mkdir(path.c_str()) == 0;
#else
  return ::mkdir(path.c_str(), 0700) == 0;
#endif
}

// Bytes of disk the file at path takes: less than its size for a sparse file; UINT64_MAX
// when the system does not say (Windows: Wine reports a file's size as its disk use).
inline uint64_t disk_bytes(const std::string& path) {
#if defined(_WIN32)
  (void)path;
  return UINT64_MAX;
#else
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.st_blocks) * 512;
#endif
}

// The size of the file at path (UINT64_MAX when it cannot be had), past 4 GiB too (a
// Windows struct stat holds 32 bits of it).
inline uint64_t file_size(const std::string& path) {
#if defined(_WIN32)
  struct _stati64 st;
  if (::_stati64(path.c_str(), &st) != 0) return UINT64_MAX;
#else
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return UINT64_MAX;
#endif
  return static_cast<uint64_t>(st.st_size);
}

// Removes a file or an empty folder (std::remove takes both on POSIX, only files on Windows).
inline void remove_path(const std::string& path) {
#if defined(_WIN32)
  if (std::remove(path.c_str()) != 0) ::_rmdir(path.c_str());
#else
  std::remove(path.c_str());
#endif
}

// Writes each piece at its offset into a new file of `size` bytes, leaving the holes between
// them unwritten: they cost no disk on filesystems with sparse files (on Windows, files are
// sparse only where the filesystem makes them so on its own, as Wine's does on Linux).
struct FilePiece {
  uint64_t offset;
  const uint8_t* bytes;
  size_t size;
};
inline bool write_pieces(const std::string& path, const std::vector<FilePiece>& pieces, uint64_t size,
                         std::string* err) {
  const auto fail = [&](const char* what) {
    *err = std::string(what) + " " + path + ": " + std::strerror(errno);
    return false;
  };
#if defined(_WIN32)
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return fail("cannot create");
  bool ok = true;
  for (const FilePiece& p : pieces) {
    if (ok && p.size > 0 &&
        (::_fseeki64(f, static_cast<long long>(p.offset), SEEK_SET) != 0 || std::fwrite(p.bytes, 1, p.size, f) != p.size)) {
      ok = fail("cannot write");
    }
  }
  if (ok && (std::fflush(f) != 0 || ::_chsize_s(::_fileno(f), static_cast<long long>(size)) != 0)) ok = fail("cannot size");
  if (std::fclose(f) != 0 && ok) ok = fail("cannot close");
  return ok;
#else
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("cannot create");
  bool ok = true;
  for (const FilePiece& p : pieces) {
    size_t done = 0;
    while (ok && done < p.size) {
      const ssize_t n = ::pwrite(fd, p.bytes + done, p.size - done, static_cast<off_t>(p.offset + done));
      if (n <= 0) {
        ok = fail("cannot write");
      } else {
        done += static_cast<size_t>(n);
      }
    }
  }
  if (ok && ::ftruncate(fd, static_cast<off_t>(size)) != 0) ok = fail("cannot size");
  if (::close(fd) != 0 && ok) ok = fail("cannot close");
  return ok;
#endif
}

// The VmFlags line of the mapping holding p in /proc/self/smaps (" hg": advised huge pages,
// " nh": advised small ones), or "" when not found.
inline std::string vm_flags(const void* p) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return "";
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  std::string flags;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
      inside = at >= lo && at < hi;
    } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      flags = line + 8;
      if (!flags.empty() && flags.back() == '\n') flags.pop_back();
      flags += ' ';
      break;
    }
  }
  std::fclose(f);
  return flags;
}

}  // namespace ptread_test
