#include "rendezvous_store.h"

#include <mlo/base/error.h>
#include <mlo/base/stop_request.h>

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <spdlog/spdlog.h>

#include <cstdlib>

#include <utility>
#include <vector>

namespace mlo {
namespace dist {
namespace detail {
namespace {

// A store whose waits poll `inner` (see the header); everything else goes to it as is.
class PollingStore : public c10d::Store {
 public:
  PollingStore(c10::intrusive_ptr<c10d::Store> inner, std::string where,
               std::chrono::milliseconds timeout)
      : c10d::Store(timeout), inner_(std::move(inner)), where_(std::move(where)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_->set(key, value);
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return inner_->compareSet(key, expected, desired);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    wait({key});
    return inner_->get(key);
  }
  int64_t add(const std::string& key, int64_t value) override { return inner_->add(key, value); }
  bool deleteKey(const std::string& key) override { return inner_->deleteKey(key); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  int64_t getNumKeys() override { return inner_->getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    poll_keys([&] { return inner_->check(keys); }, keys, timeout, where_);
  }
  // NOTE: as StoreClient's: a pure virtual from LibTorch 2.x on, a plain member before it.
  c10::intrusive_ptr<c10d::Store> clone() {
    return c10::make_intrusive<PollingStore>(inner_, where_, timeout_);
  }

 private:
  c10::intrusive_ptr<c10d::Store> inner_;
  std::string where_;
};

c10::intrusive_ptr<c10d::Store> join_agent_store(const std::string& host, int port,
                                                 int restart_count,
                                                 std::chrono::milliseconds timeout) {
  const std::string where = "torchrun's store at " + host + ":" + std::to_string(port);
  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(port);
    options.isServer = false;
    options.waitWorkers = false;
    options.timeout = timeout;
    tcp = c10::make_intrusive<c10d::TCPStore>(host, options);
  } catch (const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    throw Error("joining " + where + " (TORCHELASTIC_USE_AGENT_STORE=True) failed: " +
                (c10_error ? c10_error->what_without_backtrace() : e.what()));
  }
  auto prefixed =
      c10::make_intrusive<c10d::PrefixStore>("mlo/attempt_" + std::to_string(restart_count), tcp);
  return c10::make_intrusive<PollingStore>(prefixed, where, timeout);
}

}  // namespace

RendezvousStore open_rendezvous_store(const Rendezvous& where, std::chrono::milliseconds timeout) {
  const int own_port = where.own_store_port();
  if (where.rank == 0 && !where.agent_store) {
    spdlog::info("rendezvous ({}): {} ranks; rank 0 serves the store on {}:{}", where.launcher,
                 where.world_size, where.master_addr, own_port);
  } else if (where.rank == 0) {
    if (own_port > 0) {
      spdlog::info(
          "torchrun's agent serves a rendezvous store on {}:{}; the store client of "
          "LibTorch {} cannot join the store of a torch 2.x agent, so rank 0 serves "
          "mlo's own on port {} ({})",
          where.master_addr, where.master_port, TORCH_VERSION, own_port,
          std::getenv("MLO_STORE_PORT") ? "MLO_STORE_PORT" : "MASTER_PORT + 1");
    } else {
      spdlog::info("the ranks join the rendezvous store of torchrun's agent on {}:{}",
                   where.master_addr, where.master_port);
    }
  }
  RendezvousStore out;
  try {
    if (own_port > 0) {
      if (where.rank == 0) out.server = std::make_unique<StoreServer>(where.master_addr, own_port);
      out.store = c10::make_intrusive<StoreClient>(where.master_addr, own_port, timeout);
    } else {
      out.store =
          join_agent_store(where.master_addr, where.master_port, where.restart_count, timeout);
    }
  } catch (const Interrupted& e) {
    throw Interrupted("rank " + std::to_string(where.rank) + ": " + e.what());
  } catch (const Error& e) {
    throw Error("rank " + std::to_string(where.rank) + ": " + e.what());
  }
  return out;
}

}  // namespace detail
}  // namespace dist
}  // namespace mlo
