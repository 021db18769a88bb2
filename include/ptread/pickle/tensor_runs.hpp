// ptread — the pickle VM's memo and torch.save's tensor runs: the ~26 opcodes of each tensor
// read in one go (by RunTemplate where a run of that shape came before), the values in
// between kept as lazy memo entries made only when the pickle gets them again.
#pragma once

#include "vm_base.hpp"
#include "run_template.hpp"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace ptread {
namespace detail {

class TensorRunVM : public PickleVMBase {
 protected:
  using PickleVMBase::PickleVMBase;

  // ---- memo ----
  PTREAD_ALWAYS_INLINE bool memo_put(uint64_t key, uint32_t v) {
    if (key == memo_.size() && memo_count_ < limits_.max_memo_entries) {  // the usual case: the next key
      memo_.push_back(v);
      ++memo_count_;
      return true;
    }
    if (key < memo_.size()) {
      template_.clear();  // its gets' values may be what this overwrites
      if (PTREAD_UNLIKELY(lazy_scan_ < memo_.size()) && !lazy_.empty() && !make_lazy_entries()) return false;
      if (memo_[static_cast<size_t>(key)] == kNoNode) ++memo_count_;
      memo_[static_cast<size_t>(key)] = v;
    } else if (key < memo_.size() + 4096 && key <= 2 * static_cast<uint64_t>(op_ptr_ - begin_) + 4096) {
      // A short gap: filled. (The dense memo stays within twice the pickle read so far, so
      // gaps cannot make a few bytes of pickle claim megabytes; far keys go to memo_far_.)
      while (memo_.size() < key) memo_.push_back(kNoNode);
      memo_.push_back(v);
      ++memo_count_;
    } else {
      auto r = memo_far_.emplace(key, v);
      if (r.second) ++memo_count_; else r.first->second = v;
    }
    if (memo_count_ > limits_.max_memo_entries) {
      return fail(ErrorCode::limit_exceeded, "more memo entries than Limits::max_memo_entries");
    }
    return true;
  }
  PTREAD_ALWAYS_INLINE bool memo_get(uint64_t key) {
    uint32_t v = kNoNode;
    if (key < memo_.size()) {
      v = memo_[static_cast<size_t>(key)];
    } else if (!memo_far_.empty()) {
      auto it = memo_far_.find(key);
      if (it != memo_far_.end()) v = it->second;
    }
    if (PTREAD_UNLIKELY(v >= kLazyBit)) {
      if (v == kNoNode) return fail(ErrorCode::pickle_malformed, "memo key " + std::to_string(key) + " was never stored");
      if (!materialize(v, &v)) return false;
    }
    return push(v);
  }
  PTREAD_ALWAYS_INLINE bool memo_put_top(uint64_t key) {
    uint32_t v = 0;
    if (!top(&v)) return false;
    if (PTREAD_UNLIKELY(v >= kLazyBit)) return fail(ErrorCode::limit_exceeded, "more than 2^31 values in one pickle");
    return memo_put(key, v);
  }

  // ---- torch's tensor runs (TensorRun) ----
  // A memo entry whose value a run did not make: kLazyBit | run << 3 | what. Node ids stay
  // below kLazyBit (memo_put_top refuses more), kNoNode is no lazy entry.
  static constexpr uint32_t kLazyBit = 0x80000000u;
  static constexpr size_t kMaxLazy = (size_t{1} << 28) - 1;
  // (What a lazy entry holds: a RunValue, run_template.hpp.)
  // Where a run with lazy entries was read. Its lazy entries are made as the opcodes would
  // have made them by reading the run again (read_run with RunReader<true>), with the memo
  // as the run left it: before any memo entry is overwritten (which torch never does),
  // every lazy entry is made (make_lazy_entries). 16 bytes a run, where a copy of what the
  // run read took 56 (100,000 tensors: 1.6 MB of memory instead of 5.6).
  struct LazyRun {
    const uint8_t* at;  // the run's opcodes, after MARK MARK
    size_t before;      // the memo's size before the run: its puts were the next keys
  };

  // Reads the opcodes of a TensorRun (everything but the callable). Its memo puts are
  // written as they come, when they append to the memo (as torch's always do): lazy values
  // as kLazyBit | run << 3 | what; dropped again if the run is not taken. Each read returns
  // false at anything else.
  // Bounds: a run is tried only with kSlack bytes of pickle left, and again after each
  // text; all else a run reads is at most 272 bytes (MARK MARK, four gets and their puts,
  // ints of at most 10 bytes, two tuples of at most kRunRank ints), so reads between texts
  // need no check.
  // Replay: the same opcodes read again for a lazy entry (materialize); puts then write
  // nothing (their keys are before, before + 1 ...) and a text with a put is the node the
  // run stored.
  static constexpr size_t kSlack = 320;
  template <bool Replay>
  struct RunReader {
    const uint8_t* q;
    const uint8_t* end;
    SegmentedVector<uint32_t>& memo;
    size_t& count;         // memo_count_
    const size_t max;      // Limits::max_memo_entries
    const size_t before;   // the memo's size before the run: later keys are the run's own
    const uint32_t lazy;   // kLazyBit | the run's index << 3
    bool any_lazy = false;
    size_t puts = 0;       // Replay: the puts read so far
    int64_t dims[2][TensorRun::kRunRank];
    uint32_t ranks[2] = {0, 0};

    RunReader(const uint8_t* from, const uint8_t* to, SegmentedVector<uint32_t>& m, size_t& c, size_t limit, uint32_t run,
              size_t memo_before)
        : q(from), end(to), memo(m), count(c), max(limit), before(memo_before), lazy(kLazyBit | run << 3) {}
    PTREAD_ALWAYS_INLINE bool is(uint8_t op) const { return *q == op; }
    PTREAD_ALWAYS_INLINE bool op(uint8_t o) {  // the opcode o
      if (*q != o) return false;
      ++q;
      return true;
    }
    // A memo get of an entry made before the run: its value (a node, or a lazy value).
    PTREAD_ALWAYS_INLINE bool get_entry(uint32_t* out) {
      uint64_t key;
      if (*q == 'h') {
        key = q[1];
        q += 2;
      } else if (*q == 'j') {
        key = load_u32(q + 1);
        q += 5;
      } else {
        return false;
      }
      if (key >= before) return false;
      *out = memo[static_cast<size_t>(key)];
      return true;
    }
    // A memo get of a value made before the run.
    PTREAD_ALWAYS_INLINE bool get(uint32_t* out) { return get_entry(out) && *out < kLazyBit; }
    // BINUNICODE / SHORT_BINUNICODE text: valid UTF-8, with kSlack bytes after it.
    PTREAD_ALWAYS_INLINE bool text(std::string_view* out) {
      size_t len;
      if (*q == 0x8c) {
        len = q[1];
        q += 2;
      } else if (*q == 'X') {
        len = load_u32(q + 1);
        q += 5;
      } else {
        return false;
      }
      if (static_cast<size_t>(end - q) < len || static_cast<size_t>(end - q) - len < kSlack || !pickle_text_ok(q, len, end)) {
        return false;
      }
      *out = std::string_view(reinterpret_cast<const char*>(q), len);
      q += len;
      return true;
    }
    // An optional memo put of the value just read: appended (v), else the run is refused.
    PTREAD_ALWAYS_INLINE bool put(uint32_t v) {
      if constexpr (Replay) {
        static_cast<void>(v);
        if (*q == 'q') {
          q += 2;
        } else if (*q == 'r') {
          q += 5;
        } else if (*q == 0x94) {
          ++q;
        } else {
          return true;
        }
        ++puts;
        return true;
      }
      uint64_t key;
      if (*q == 'q') {
        key = q[1];
        q += 2;
      } else if (*q == 'r') {
        key = load_u32(q + 1);
        q += 5;
      } else if (*q == 0x94) {
        key = count;
        ++q;
      } else {
        return true;
      }
      if (key != memo.size() || count >= max) return false;
      memo.push_back(v);
      ++count;
      return true;
    }
    // No memo put follows (ints, None, bools, the storage are never memoized by torch).
    PTREAD_ALWAYS_INLINE bool no_put() const { return *q != 'q' && *q != 'r' && *q != 0x94; }
    // put() of a value the run does not make: its lazy memo entry.
    PTREAD_ALWAYS_INLINE bool put_lazy(RunValue what) {
      if (no_put()) return true;
      any_lazy = true;
      return put(lazy | what);
    }
    // Replay: the node the run's next put stored.
    uint32_t stored() const { return memo[before + puts]; }
    // BININT1, BININT2, BININT, or LONG1 of at most 8 bytes (run_int), with no put after it.
    PTREAD_ALWAYS_INLINE bool integer(int64_t* out) {
      const size_t n = run_int(q, out);
      q += n;
      return n != 0 && no_put();
    }
    // A memo get, or BINUNICODE / SHORT_BINUNICODE text (valid UTF-8, with kSlack bytes after
    // it) made into a node of g; then its put.
    PTREAD_ALWAYS_INLINE bool get_or_text(Graph& g, uint32_t* node) {
      if (*q == 'h' || *q == 'j') return get(node) && put(*node);
      std::string_view t;
      if (!text(&t)) return false;
      *node = Replay && !no_put() ? stored() : g.add_text(ValueKind::string, t);
      return put(*node);
    }
    // The storage key: a memo get of a node (r->key), of another run's key (its lazy value:
    // key_text from that run, read by key_of), or BINUNICODE / SHORT_BINUNICODE text (as
    // get_or_text) that stays in the pickle: its node is made only if something gets it
    // (kRunKey). Then its put.
    template <class KeyOf>
    PTREAD_ALWAYS_INLINE bool key(TensorRun* r, KeyOf&& key_of) {
      if (*q == 'h' || *q == 'j') {
        uint32_t v;
        if (!get_entry(&v)) return false;
        if (v < kLazyBit) {
          r->key = v;
        } else if (v != kNoNode && (v & 7) == kRunKey) {
          r->key = kNoNode;
          r->key_lazy = v;
          r->key_text = key_of(v);
        } else {
          return false;
        }
        return put(v);
      }
      if (!text(&r->key_text)) return false;
      r->key = kNoNode;
      r->key_lazy = lazy | kRunKey;
      return put_lazy(kRunKey);
    }
    // Size (k = 0) or stride (k = 1): EMPTY_TUPLE, ints TUPLE1-3, or MARK ints TUPLE; then
    // its put (the empty tuple is one node, given as empty).
    PTREAD_ALWAYS_INLINE bool tuple(int k, uint32_t empty) {
      if (*q == ')') {
        ++q;
        return put(empty);
      }
      const bool marked = *q == '(';
      if (marked) ++q;
      uint32_t n = 0;
      while (*q == 'K' || *q == 'M' || *q == 'J' || *q == 0x8a) {
        if (n == TensorRun::kRunRank || !integer(&dims[k][n])) return false;
        ++n;
      }
      if (marked ? *q != 't' : (*q < 0x85 || *q > 0x87 || static_cast<uint32_t>(*q - 0x84) != n)) return false;
      ++q;
      ranks[k] = n;
      return n ? put_lazy(k ? kRunStride : kRunSize) : put(empty);
    }
  };

  // At a memo get that pushed the callable of a TensorRun (MARK MARK follows, at p):
  // reads the run and, when the hooks make its tensor, stands for its opcodes (p moves past
  // the final REDUCE). A run that does not match, or that the hooks decline, is left to the
  // dispatch loop with the memo as it was (nodes it made stay, unreferenced). A run of the
  // shape of one read before is read by its template (RunTemplate: the bytes compared, the
  // holes decoded and checked), else opcode by opcode (RunReader).
  PTREAD_NOINLINE void tensor_run(const uint8_t*& p) {
    const uint32_t fn = stack_.back();
    if (g_.kind(fn) != ValueKind::global || static_cast<size_t>(end_ - p) < kSlack || stack_.size() + 32 > max_stack_ ||
        lazy_.size() >= kMaxLazy || limits_.max_container_items < 8) {
      return;
    }
    const uint8_t* const at = p + 2;
    const size_t count_before = memo_count_, before = memo_.size();
    const uint32_t run = static_cast<uint32_t>(lazy_.size());
    TensorRun r;
    r.fn = fn;
    int64_t ints[RunTemplate::kMaxInts];  // by template: numel, offset, sizes, strides
    const int64_t* sizes = ints + RunTemplate::kDims;
    const int64_t* strides = sizes + TensorRun::kRunRank;
    const uint8_t* after = nullptr;       // the run's end, once read
    bool any_lazy = false;
    const bool by_template = !template_.empty() && static_cast<size_t>(end_ - at) >= template_.size() + kSlack &&
                             template_.same_shape(at) && template_run(at, before, run, &r, ints);
    RunReader<false> in(at, end_, memo_, memo_count_, limits_.max_memo_entries, run, before);
    if (by_template) {
      after = at + template_.size();
      any_lazy = template_.puts() != 0;
    } else if (read_run(in, &r)) {
      after = in.q;
      any_lazy = in.any_lazy;
      sizes = in.dims[0];
      strides = in.dims[1];
    }
    uint32_t tensor = kNoNode;
    if (after != nullptr && (p >= frame_end_ || after <= frame_end_)) {  // (one that leaves a frame: opcode by opcode)
      if (r.rank) {
        r.dims = static_cast<int64_t*>(g_.arena.allocate(2 * r.rank * sizeof(int64_t), alignof(int64_t)));
        for (uint32_t d = 0; d < r.rank; ++d) {
          r.dims[d] = sizes[d];
          r.dims[r.rank + d] = strides[d];
        }
      }
      tensor = hooks_.tensor_run(g_, r);
    }
    if (tensor == kNoNode) {  // not taken: the memo as it was
      memo_.truncate(before);
      memo_count_ = count_before;  // (lazy_scan_ <= before: a run writes no entry below it)
      return;
    }
    if (any_lazy) lazy_.push_back(LazyRun{at, before});
    stack_.pop_back();
    stack_.push_back(tensor);  // where fn was: cannot fail
    if (by_template) {
      ++template_runs_;
      if (++template_streak_ >= 2) template_good_ = true;
    } else {
      template_streak_ = 0;
      remember_run(at, after, r);
    }
    p = after;
    ++runs_taken_;
    if (reserve_ != nullptr) reserve_->progress(static_cast<size_t>(p - begin_));
  }

  // After a run read in full and taken: a template from it, when there is none or the one
  // in use read two runs in a row since it was made (a checkpoint's runs of one shape, now
  // of another). Where the template in use did not (runs of several shapes in turn: two
  // dtypes, a layer's shapes), templates are made less and less often (after 2, 4 ... 64
  // such runs read in full), so that making them costs little where they serve little. The
  // template's gets' values are this run's: the memo entries below `before` change only by
  // an overwrite, which drops the template.
  void remember_run(const uint8_t* at, const uint8_t* after, const TensorRun& r) {
    if (!template_.empty()) {
      if (template_good_) {
        template_backoff_ = 1;
      } else if (template_wait_ > 0) {
        --template_wait_;
        return;
      } else {
        template_backoff_ = std::min<uint32_t>(template_backoff_ * 2, 64);
        template_wait_ = template_backoff_;
      }
    }
    template_good_ = false;  // (template_streak_ is 0: this run was read in full)
    if (template_.make(at, after, end_)) {
      template_gets_[0] = r.tag;
      template_gets_[1] = r.cls;
      template_gets_[2] = r.location;
      template_gets_[3] = r.hooks_cls;
    }
  }

  // A run at `at` of the template's shape (same_shape, with kSlack bytes after it) read
  // from its holes into r and ints, as read_run would read it: the gets are the template's
  // (the same keys, entries unchanged since), and each hole is checked as the opcode reader
  // checks it: the puts append to the memo, within Limits::max_memo_entries; the key is
  // valid UTF-8; a LONG1 fits. Everything is checked before the memo is written: false
  // leaves it as it was.
  PTREAD_ALWAYS_INLINE bool template_run(const uint8_t* at, size_t before, uint32_t run, TensorRun* r,
                                         int64_t (&ints)[RunTemplate::kMaxInts]) {
    const RunTemplate& t = template_;
    const uint32_t puts = t.puts();
    if (memo_count_ != before || puts > limits_.max_memo_entries - std::min(memo_count_, limits_.max_memo_entries)) {
      return false;  // (MEMOIZE keys follow the count; the limit: the reader reports it)
    }
    const RunTemplate::Put* put = t.puts_begin();
    switch (t.put_width()) {  // the keys: before, before + 1 ...
      case 4:
        for (uint32_t k = 0; k < puts; ++k) {
          if (load_u32(at + put[k].at + 1) != before + k) return false;
        }
        break;
      case 1:
        for (uint32_t k = 0; k < puts; ++k) {
          if (at[put[k].at + 1] != before + k) return false;
        }
        break;
      case 0:
        break;
      default:
        for (uint32_t k = 0; k < puts; ++k) {
          const uint8_t* q = at + put[k].at + 1;
          if (put[k].width == 4 ? load_u32(q) != before + k : put[k].width == 1 && *q != before + k) return false;
        }
    }
    if (!pickle_text_ok(at + t.key_at(), t.key_len(), end_)) return false;
    const RunTemplate::Int* in = t.ints_begin();
    for (uint32_t k = 0; t.ints_k() && k < t.ints(); ++k) ints[in[k].target] = at[in[k].at + 1];
    for (uint32_t k = 0; !t.ints_k() && k < t.ints(); ++k) {
      if (run_int(at + in[k].at, &ints[in[k].target]) == 0) return false;
    }
    const uint32_t lazy = kLazyBit | run << 3;
    const uint32_t* what = t.put_whats();
    if (uint32_t* w = memo_.room(RunTemplate::kMaxPuts + 2)) {  // eight written, `puts` of them kept
      for (size_t k = 0; k < RunTemplate::kMaxPuts + 2; ++k) w[k] = lazy | what[k];
      memo_.add_in_place(puts);
    } else {
      for (uint32_t k = 0; k < puts; ++k) memo_.push_back(lazy | what[k]);
    }
    memo_count_ += puts;
    r->tag = template_gets_[0];
    r->cls = template_gets_[1];
    r->location = template_gets_[2];
    r->hooks_cls = template_gets_[3];
    r->key = kNoNode;
    r->key_text = std::string_view(reinterpret_cast<const char*>(at + t.key_at()), t.key_len());
    r->key_lazy = lazy | kRunKey;
    r->numel = ints[RunTemplate::kNumel];
    r->offset = ints[RunTemplate::kOffset];
    r->rank = t.rank();
    r->pid_none = t.pid_none();
    r->requires_grad = t.requires_grad();
    return true;
  }

  // The opcodes of a TensorRun after MARK MARK, read into r (all but fn and dims, which
  // stay in in.dims).
  template <bool Replay>
  PTREAD_ALWAYS_INLINE bool read_run(RunReader<Replay>& in, TensorRun* r) {
    const uint32_t empty = g_.add_container(ValueKind::tuple);
    auto key_of = [this](uint32_t v) { return run_key_text(v); };
    bool ok = in.get(&r->tag) && in.put(r->tag) && in.get(&r->cls) && in.put(r->cls) && in.key(r, key_of) &&
              in.get_or_text(g_, &r->location) && in.integer(&r->numel);
    if (ok && in.is('N')) {
      r->pid_none = true;
      ++in.q;
      ok = in.no_put();
    }
    ok = ok && in.op('t') && in.put_lazy(kRunPid) && in.op('Q') && in.no_put() && in.integer(&r->offset) &&
         in.tuple(0, empty) && in.tuple(1, empty) && in.ranks[0] == in.ranks[1] && (in.is(0x88) || in.is(0x89));
    if (ok) {
      r->requires_grad = *in.q++ == 0x88;
      ok = in.no_put() && in.get(&r->hooks_cls) && in.put(r->hooks_cls) && in.op(')') && in.op('R') &&
           in.put_lazy(kRunHooks) && in.op('t') && in.put_lazy(kRunArgs) && in.op('R');
    }
    r->rank = in.ranks[0];
    return ok;
  }

  // The key text of the run of lazy value v (kRunKey), which that run read and checked.
  std::string_view run_key_text(uint32_t v) const {
    const uint8_t* q = lazy_[(v & ~kLazyBit) >> 3].at;
    for (int k = 0; k < 2; ++k) {  // the tag and the class: memo gets, each perhaps put
      q += *q == 'h' ? 2 : 5;
      q += *q == 'q' ? 2 : *q == 'r' ? 5 : *q == 0x94 ? 1 : 0;
    }
    if (*q == 0x8c) return std::string_view(reinterpret_cast<const char*>(q + 2), q[1]);
    return std::string_view(reinterpret_cast<const char*>(q + 5), load_u32(q + 1));
  }

  // Before a memo entry is overwritten: every lazy entry not made yet is made, while the
  // memo still holds what its run read and wrote. (Each memo entry is looked at once.)
  PTREAD_NOINLINE bool make_lazy_entries() {
    for (size_t k = lazy_scan_; k < memo_.size(); ++k) {
      const uint32_t v = memo_[k];
      uint32_t node = 0;
      if (v >= kLazyBit && v != kNoNode && !materialize(v, &node)) return false;
    }
    lazy_scan_ = memo_.size();
    return true;
  }

  // The value of lazy memo entry v, made once: later gets see the same node.
  PTREAD_NOINLINE bool materialize(uint32_t v, uint32_t* out) {
    const auto found = made_.find(v);
    if (found != made_.end()) {
      *out = found->second;
      return true;
    }
    const uint32_t run = (v & ~kLazyBit) >> 3;
    const LazyRun lr = lazy_[run];
    RunReader<true> in(lr.at, end_, memo_, memo_count_, limits_.max_memo_entries, run, lr.before);
    TensorRun r;
    if (!read_run(in, &r)) return fail(ErrorCode::pickle_malformed, "internal: a lazy memo entry's run reads differently");
    const uint32_t base = v & ~uint32_t{7};
    uint32_t node = 0;
    switch (static_cast<RunValue>(v & 7)) {
      case kRunKey:
        node = g_.add_text(ValueKind::string, r.key_text);
        break;
      case kRunPid: {
        uint32_t key = r.key;
        if (key == kNoNode && !materialize(r.key_lazy, &key)) return false;
        const uint32_t items[6] = {r.tag, r.cls, key, r.location, g_.add_int(r.numel), kNoneNode};
        node = g_.add_container(ValueKind::tuple, items, r.pid_none ? 6 : 5);
        break;
      }
      case kRunSize: case kRunStride: {
        const int64_t* d = in.dims[(v & 7) == kRunStride ? 1 : 0];
        uint32_t items[TensorRun::kRunRank];
        for (uint32_t k = 0; k < r.rank; ++k) items[k] = g_.add_int(d[k]);
        node = g_.add_container(ValueKind::tuple, items, r.rank);
        break;
      }
      case kRunHooks: {
        auto made = hooks_.call(g_, r.hooks_cls, g_.add_container(ValueKind::tuple));
        if (!made) return fail(with_where(std::move(made).error()));
        node = *made;
        break;
      }
      case kRunArgs: {
        uint32_t pid = 0, size = 0, stride = 0, hooks = 0;
        if (!materialize(base | kRunPid, &pid) || !materialize(base | kRunHooks, &hooks)) return false;
        if (r.rank == 0) {
          size = stride = g_.add_container(ValueKind::tuple);
        } else if (!materialize(base | kRunSize, &size) || !materialize(base | kRunStride, &stride)) {
          return false;
        }
        auto storage = hooks_.persistent_load(g_, pid);
        if (!storage) return fail(with_where(std::move(storage).error()));
        const uint32_t items[6] = {*storage, g_.add_int(r.offset), size, stride, r.requires_grad ? kTrueNode : kFalseNode, hooks};
        node = g_.add_container(ValueKind::tuple, items, 6);
        break;
      }
      default:
        return fail(ErrorCode::pickle_malformed, "internal: bad lazy memo entry");
    }
    made_.emplace(v, node);
    *out = node;
    return true;
  }

  SegmentedVector<uint32_t> memo_{&pool_};  // node by memo key; kNoNode where none
  std::unordered_map<uint64_t, uint32_t, KeyedHash> memo_far_;  // keys a file chose: KeyedHash
  size_t memo_count_ = 0;
  size_t runs_taken_ = 0;
  size_t template_runs_ = 0;         // of them, read by template_
  RunTemplate template_;             // of a run read in full (see tensor_run)
  uint32_t template_gets_[4] = {};   // its gets' values: tag, cls, location, hooks_cls
  uint32_t template_streak_ = 0;     // runs read by the template in a row
  bool template_good_ = false;       // it read two in a row since it was made
  uint32_t template_backoff_ = 1, template_wait_ = 0;  // remember_run
  SegmentedVector<LazyRun> lazy_{&pool_};  // per TensorRun with a lazy memo entry
  size_t lazy_scan_ = 0;                     // memo entries below this hold no lazy entry not made
  std::unordered_map<uint32_t, uint32_t> made_;  // lazy entries made since: their node
};

}  // namespace detail
}  // namespace ptread
