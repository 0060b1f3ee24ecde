// ThreadSanitizer annotations for absl::Mutex and absl::CondVar, for the tsan preset only.
//
// Debian's libabsl is not built with -fsanitize=thread, so TSan does not see absl::Mutex's
// acquire and release: every access guarded by an absl::Mutex looks like a race to it. This
// library is preloaded into the tests (LD_PRELOAD, set by the tsan test preset) and interposes the
// exported Mutex and CondVar entry points: each calls the real one (dlsym RTLD_NEXT) between
// __tsan_mutex_pre_* / __tsan_mutex_post_* annotations, which is what absl itself does when it is
// compiled with TSan. Waits (Await*, CondVar::Wait*) release and re-acquire the mutex inside, so
// they are annotated as an unlock followed by a lock; like absl, the conditions a lock, unlock or
// wait evaluates run inside the annotated operation, where TSan ignores memory accesses.
// absl::Notification and the other absl types built on Mutex go through these entry points as well
// (calls inside the shared library are interposable).
//
// CondVar::WaitWithDeadline is left alone: gRPC's event engine waits on it with a mutex it took in
// a way these wrappers do not see (TSan then reports an unlock of an unlocked mutex), and the
// service's own code does not call it.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace {

template <typename Fn>
Fn Real(const char* mangled) {
  void* f = dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found\n", mangled);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

// gRPC's own mutexes (locked from libgrpc/libgpr, whose accesses TSan cannot see anyway) are
// left unannotated: gRPC also waits on them through paths these wrappers do not cover, which
// would look like double locks.
bool FromGrpc(const void* caller) {
  Dl_info info;
  if (dladdr(caller, &info) == 0 || info.dli_fname == nullptr) return false;
  return std::strstr(info.dli_fname, "libgrpc") != nullptr ||
         std::strstr(info.dli_fname, "libgpr") != nullptr;
}

// Looks the real function up once; `annotate` is false for calls from gRPC.
#define DLRM_REAL(type, mangled)                                \
  static const auto real = Real<type>(mangled);                 \
  const bool annotate = !FromGrpc(__builtin_return_address(0)); \
  (void)annotate

constexpr unsigned kRead = __tsan_mutex_read_lock;

// absl's deadlock detector keeps a graph of lock order in uninstrumented code that TSan reports
// as racy; TSan detects lock-order inversions itself.
const bool kNoAbslDeadlockDetection = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

// The mutex is held before and after `wait`, which releases and re-acquires it inside: a release
// now, an acquire when it returns. The wait itself runs between pre_lock and post_lock, where
// TSan ignores the thread's memory accesses, as absl's own annotations have it: the conditions
// it evaluates read guarded state while the mutex is held internally.
template <typename Wait>
auto Waiting(bool annotate, void* mu, unsigned flags, Wait wait) {
  if (!annotate) return wait();
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
  __tsan_mutex_pre_lock(mu, flags);
  auto result = wait();
  __tsan_mutex_post_lock(mu, flags, 0);
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  DLRM_REAL(void (*)(Mutex*), "_ZN4absl7debian35MutexD2Ev");
  if (annotate) __tsan_mutex_destroy(this, 0);
  real(this);
}

void Mutex::Lock() {
  DLRM_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  if (annotate) __tsan_mutex_pre_lock(this, 0);
  real(this);
  if (annotate) __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  DLRM_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  if (annotate) __tsan_mutex_pre_unlock(this, 0);
  real(this);
  if (annotate) __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  DLRM_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  if (annotate) __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool locked = real(this);
  if (annotate)
    __tsan_mutex_post_lock(this, locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed, 0);
  return locked;
}

void Mutex::ReaderLock() {
  DLRM_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  if (annotate) __tsan_mutex_pre_lock(this, kRead);
  real(this);
  if (annotate) __tsan_mutex_post_lock(this, kRead, 0);
}

void Mutex::ReaderUnlock() {
  DLRM_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  if (annotate) __tsan_mutex_pre_unlock(this, kRead);
  real(this);
  if (annotate) __tsan_mutex_post_unlock(this, kRead);
}

bool Mutex::ReaderTryLock() {
  DLRM_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  if (annotate) __tsan_mutex_pre_lock(this, __tsan_mutex_try_read_lock);
  const bool locked = real(this);
  if (annotate)
    __tsan_mutex_post_lock(
        this, locked ? __tsan_mutex_try_read_lock : __tsan_mutex_try_read_lock_failed, 0);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  DLRM_REAL(void (*)(Mutex*, const Condition&),
            "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  if (annotate) __tsan_mutex_pre_lock(this, 0);
  real(this, cond);
  if (annotate) __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  DLRM_REAL(void (*)(Mutex*, const Condition&),
            "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  if (annotate) __tsan_mutex_pre_lock(this, kRead);
  real(this, cond);
  if (annotate) __tsan_mutex_post_lock(this, kRead, 0);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  DLRM_REAL(bool (*)(Mutex*, const Condition&, Duration),
            "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  if (annotate) __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, timeout);
  if (annotate) __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  DLRM_REAL(bool (*)(Mutex*, const Condition&, Time),
            "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  if (annotate) __tsan_mutex_pre_lock(this, 0);
  const bool met = real(this, cond, deadline);
  if (annotate) __tsan_mutex_post_lock(this, 0, 0);
  return met;
}

void Mutex::Await(const Condition& cond) {
  DLRM_REAL(void (*)(Mutex*, const Condition&), "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Waiting(annotate, this, 0, [&] {
    real(this, cond);
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  DLRM_REAL(bool (*)(Mutex*, const Condition&, Duration),
            "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Waiting(annotate, this, 0, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  DLRM_REAL(bool (*)(Mutex*, const Condition&, Time),
            "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Waiting(annotate, this, 0, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  DLRM_REAL(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Waiting(annotate, mu, 0, [&] {
    real(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  DLRM_REAL(bool (*)(CondVar*, Mutex*, Duration),
            "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return Waiting(annotate, mu, 0, [&] { return real(this, mu, timeout); });
}

ABSL_NAMESPACE_END
}  // namespace absl
