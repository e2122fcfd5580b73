#include <mlo/base/stop_request.h>

#include <atomic>

namespace mlo {
namespace {

// (lock-free, hence safe to store from a signal handler)
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler stores this flag");

}  // namespace

void request_stop() noexcept { g_stop.store(true); }
void clear_stop_request() noexcept { g_stop.store(false); }
bool stop_requested() noexcept { return g_stop.load(); }

}  // namespace mlo
