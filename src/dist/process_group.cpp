// The process group over c10d. c10d's headers stay in this file: the public header exposes only
// tensors and options. Gloo's and NCCL's headers are compiled only when asked for, hence the
// defines, and only where this build has them (build_config.h: Gloo with Debian's LibTorch,
// NCCL in CUDA builds).
#include <mlo/build_config.h>
#if MLO_WITH_GLOO && !defined(USE_C10D_GLOO)
#define USE_C10D_GLOO 1
#endif
#if MLO_WITH_NCCL && !defined(USE_C10D_NCCL)
#define USE_C10D_NCCL 1
#endif
#include <mlo/dist/process_group.h>

#include <mlo/base/error.h>
#include <mlo/base/stop_request.h>
#include <mlo/detail/torch_compat.h>

#include "rendezvous_store.h"

#if MLO_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if MLO_WITH_CUDA
#include <torch/cuda.h>
#endif
#if MLO_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <torch/torch.h>
#include <torch/version.h>

#include <csignal>
#include <cstdlib>
#include <map>
#include <thread>

namespace mlo {
namespace dist {
namespace {

// LibTorch 2.x moved the collectives of Gloo and NCCL from ProcessGroup to Backend.
#if MLO_TORCH_AT_LEAST(2, 0)
using Collectives = c10d::Backend;
#else
using Collectives = c10d::ProcessGroup;
#endif

// An exception's message without c10's C++ backtrace (noise in a user's log).
std::string message(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

// Whether this build and machine can run `backend` for `where`'s rank.
void check_backend(const Rendezvous& where, Backend backend) {
  if (backend == Backend::kGloo) {
    MLO_CHECK(MLO_WITH_GLOO, "rank ", where.rank, ": backend gloo (data parallelism on CPU) "
              "is not in this build: LibTorch ", TORCH_VERSION, " ships no Gloo headers to "
              "compile it against (build against Debian's LibTorch 1.13 for it, or use backend "
              "nccl on CUDA)");
    return;
  }
#if MLO_WITH_NCCL
  const auto devices = static_cast<int>(torch::cuda::device_count());
  MLO_CHECK(devices > 0, "rank ", where.rank,
            ": backend nccl needs a CUDA device, but none is visible (check "
            "CUDA_VISIBLE_DEVICES; on CPU use gloo)");
  // NOTE: no check of LOCAL_RANK against the count: a launcher may give each rank one GPU
  // through CUDA_VISIBLE_DEVICES. Two ranks on one GPU are refused by NCCL itself.
#else
  MLO_CHECK(false, "rank ", where.rank, ": backend nccl needs a CUDA build of mlo with NCCL; "
            "on CPU use gloo");
#endif
}

// The Gloo or NCCL group of `where`, rendezvousing through `store`.
c10::intrusive_ptr<Collectives> make_group(const c10::intrusive_ptr<c10d::Store>& store,
                                           const Rendezvous& where, const GroupOptions& options) {
#if MLO_WITH_NCCL
  if (options.backend == Backend::kNccl) {
    // NOTE: without blocking wait, NCCL's wait() returns at once and a hung peer is noticed by
    // a watchdog that aborts the process with no word from mlo; with it, wait() throws after the
    // timeout like Gloo's, and the caller names the collective. A user's own setting wins.
#if MLO_TORCH_AT_LEAST(2, 2)
    setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
#else
    setenv("NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
#endif
    auto nccl = c10d::ProcessGroupNCCL::Options::create();
    nccl->timeout = options.timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, where.rank, where.world_size, nccl);
  }
#endif
#if MLO_WITH_GLOO
  auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (where.master_addr == "127.0.0.1" || where.master_addr == "localhost") {
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, where.rank, where.world_size, gloo);
#else
  (void)store;
  (void)where;
  MLO_INTERNAL_ASSERT(false, "check_backend lets no Gloo group through in a build without Gloo");
  return {};
#endif
}

}  // namespace

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;  // rank 0's holds the server
  c10::intrusive_ptr<Collectives> group;
  std::chrono::milliseconds timeout;
  Backend backend = Backend::kGloo;

  // NCCL reduces CUDA tensors only; say so before c10d does in its own words.
  void check_devices(const std::vector<torch::Tensor>& tensors, const char* what, int rank) const {
    if (backend != Backend::kNccl) return;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      MLO_CHECK(!t.defined() || t.numel() == 0 || t.is_cuda(), "rank ", rank, ": ", what,
                " with backend nccl needs CUDA tensors, but tensor ", i, " is on ", t.device(),
                " (move it to the rank's GPU, or use backend gloo for CPU tensors)");
    }
  }

  // One communication buffer per (dtype, device), grown to the largest bucket and kept.
  // NOTE: kept on purpose. c10d's worker threads hold the tensors of a collective until some time
  // after it completed; a buffer allocated per call would then be freed on a worker thread, at a
  // moment that varies from run to run, which mlo's exact meter (it counts the allocating
  // thread's frees) would see as a different peak each time. A kept buffer is allocated once,
  // by the calling thread, and never freed while the group lives.
  std::map<std::pair<int, std::string>, torch::Tensor> scratch;

  // `tensors` (one dtype and device) copied into the start of their buffer; returns that part.
  torch::Tensor pack(const std::pair<int, std::string>& key,
                     const std::vector<torch::Tensor>& tensors) {
    int64_t numel = 0;
    for (const auto& t : tensors) numel += t.numel();
    torch::Tensor& buffer = scratch[key];
    if (!buffer.defined() || buffer.numel() < numel) {
      buffer = torch::Tensor();  // the old one goes first
      buffer = torch::empty({numel}, tensors.front().options());
    }
    torch::Tensor flat = buffer.narrow(0, 0, numel);
    int64_t offset = 0;
    for (const auto& t : tensors) {
      flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
      offset += t.numel();
    }
    return flat;
  }

  // Waits for `work`, turning a timeout or a peer's failure into an error a user can act on.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what, int rank) const {
    try {
      work->wait(timeout);
    } catch (const std::exception& e) {
      throw Error(std::string("rank ") + std::to_string(rank) + ": " + what +
                  " failed (a peer rank died, hangs or is slower than the timeout of " +
                  std::to_string(timeout.count()) + " ms): " + message(e));
    }
    // NOTE: Gloo's worker thread lets go of a finished collective a moment after wait() returns.
    // Waiting for that (briefly) makes the caller the work's last owner, so the tensors it holds
    // are freed on the caller's thread, which mlo's exact meter sees (it counts the metering
    // thread's frees); otherwise a tensor of the caller's could be freed unseen on the worker.
    if (backend == Backend::kGloo) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (work.use_count() > 1 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
    }
  }
};

std::shared_ptr<ProcessGroup> ProcessGroup::connect(const Rendezvous& where,
                                                    const GroupOptions& options) {
  MLO_CHECK(where.world_size >= 1 && where.rank >= 0 && where.rank < where.world_size,
            "distributed: rank ", where.rank, " is not in [0, ", where.world_size, ")");
  MLO_CHECK(options.timeout.count() > 0, "distributed: timeout must be > 0 ms, got ",
            options.timeout.count());
  auto impl = std::make_unique<Impl>();
  impl->timeout = options.timeout;
  impl->backend = options.backend;
  if (where.world_size > 1) {
    check_backend(where, options.backend);
    // NOTE: a write to the socket of a peer that died raises SIGPIPE, whose default action ends
    // this process silently (exit 141) before the collective can fail with the error that names
    // the dead peer (seen in the fault matrix's "rank killed mid-collective"). Ignored, the write
    // fails with EPIPE and the collective throws.
    std::signal(SIGPIPE, SIG_IGN);
    impl->store = detail::open_rendezvous_store(where, options.timeout);
    try {
      impl->group = make_group(impl->store, where, options);
    } catch (const std::exception& e) {
      // (a signal ends the store's waits inside the group's own rendezvous)
      if (stop_requested()) {
        throw Interrupted("rank " + std::to_string(where.rank) + ": stopped by a signal (SIGINT "
                          "or SIGTERM) while joining the " + to_string(options.backend) +
                          " group");
      }
      throw Error("rank " + std::to_string(where.rank) + ": joining the " +
                  to_string(options.backend) + " group of " + std::to_string(where.world_size) +
                  " ranks failed: " + message(e));
    }
  }
  return std::shared_ptr<ProcessGroup>(
      new ProcessGroup(std::move(impl), where.rank, where.world_size));
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl, int rank, int size)
    : impl_(std::move(impl)), rank_(rank), size_(size) {}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::all_reduce_mean(const std::vector<torch::Tensor>& tensors) {
  all_reduce(tensors, /*mean=*/true);
}

void ProcessGroup::all_reduce_sum(const std::vector<torch::Tensor>& tensors) {
  all_reduce(tensors, /*mean=*/false);
}

namespace {

// The tensors grouped by (dtype, device): one flat buffer, hence one collective, per group.
std::map<std::pair<int, std::string>, std::vector<torch::Tensor>> buckets(
    const std::vector<torch::Tensor>& tensors) {
  std::map<std::pair<int, std::string>, std::vector<torch::Tensor>> out;
  for (const auto& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    out[{static_cast<int>(t.scalar_type()), t.device().str()}].push_back(t);
  }
  return out;
}

void unflatten(const torch::Tensor& flat, const std::vector<torch::Tensor>& tensors) {
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

void ProcessGroup::all_reduce(const std::vector<torch::Tensor>& tensors, bool mean) {
  if (mean) {
    for (const auto& t : tensors) {
      MLO_CHECK(!t.defined() || t.is_floating_point(),
                "distributed: all_reduce_mean of a ", t.scalar_type(),
                " tensor (a mean needs a floating-point type; use all_reduce_sum)");
    }
  }
  if (size_ == 1) return;
  impl_->check_devices(tensors, "all_reduce", rank_);
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets(tensors)) {
    std::vector<torch::Tensor> flat{impl_->pack(bucket.first, bucket.second)};
    impl_->wait(impl_->group->allreduce(flat), "all_reduce", rank_);
    if (mean) flat[0].div_(size_);
    unflatten(flat[0], bucket.second);
  }
}

void ProcessGroup::reduce_mean(const std::vector<torch::Tensor>& tensors, int root) {
  MLO_CHECK(root >= 0 && root < size_, "distributed: reduce root ", root, " is not in [0, ",
            size_, ")");
  if (size_ == 1) return;
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets(tensors)) {
    MLO_CHECK(bucket.second.front().is_floating_point(), "distributed: reduce_mean of a ",
              bucket.second.front().scalar_type(), " tensor (a mean needs a floating-point type)");
    std::vector<torch::Tensor> flat{impl_->pack(bucket.first, bucket.second)};
    c10d::ReduceOptions options;
    options.rootRank = root;
    options.reduceOp = c10d::ReduceOp::SUM;
    impl_->wait(impl_->group->reduce(flat, options), "reduce", rank_);
    if (rank_ == root) {
      flat[0].div_(size_);
      unflatten(flat[0], bucket.second);
    }
  }
}

void ProcessGroup::broadcast(const std::vector<torch::Tensor>& tensors, int root) {
  MLO_CHECK(root >= 0 && root < size_, "distributed: broadcast root ", root, " is not in [0, ",
            size_, ")");
  if (size_ == 1) return;
  impl_->check_devices(tensors, "broadcast", rank_);
  torch::NoGradGuard no_grad;
  for (auto& bucket : buckets(tensors)) {
    std::vector<torch::Tensor> flat{impl_->pack(bucket.first, bucket.second)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    impl_->wait(impl_->group->broadcast(flat, options), "broadcast", rank_);
    unflatten(flat[0], bucket.second);
  }
}

namespace {

void check_flat_pair(const torch::Tensor& full, const torch::Tensor& shard, int size,
                     const char* what) {
  MLO_CHECK(full.defined() && shard.defined() && full.is_contiguous() && shard.is_contiguous() &&
                full.scalar_type() == shard.scalar_type() && full.dim() == 1 && shard.dim() == 1 &&
                full.numel() == shard.numel() * size,
            "distributed: ", what, " needs a contiguous flat shard and a flat tensor of ", size,
            " shards of the same dtype");
}

}  // namespace

void ProcessGroup::all_gather(const torch::Tensor& shard, const torch::Tensor& full) {
  check_flat_pair(full, shard, size_, "all_gather");
  torch::NoGradGuard no_grad;
  if (size_ == 1) {
    full.copy_(shard);
    return;
  }
  impl_->check_devices({shard, full}, "all_gather", rank_);
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < size_; ++r) {
    outputs[0].push_back(full.narrow(0, r * shard.numel(), shard.numel()));
  }
  std::vector<torch::Tensor> inputs{shard};
  impl_->wait(impl_->group->allgather(outputs, inputs), "all_gather", rank_);
}

void ProcessGroup::reduce_scatter_mean(const torch::Tensor& full, const torch::Tensor& shard) {
  check_flat_pair(full, shard, size_, "reduce_scatter");
  MLO_CHECK(full.is_floating_point(), "distributed: reduce_scatter_mean of a ",
            full.scalar_type(), " tensor (a mean needs a floating-point type)");
  torch::NoGradGuard no_grad;
  const int64_t n = shard.numel();
  if (size_ == 1) {
    shard.copy_(full);
    return;
  }
  impl_->check_devices({shard, full}, "reduce_scatter", rank_);
  if (impl_->backend == Backend::kNccl) {
    std::vector<torch::Tensor> outputs{shard};
    std::vector<std::vector<torch::Tensor>> inputs(1);
    for (int r = 0; r < size_; ++r) inputs[0].push_back(full.narrow(0, r * n, n));
    impl_->wait(impl_->group->reduce_scatter(outputs, inputs), "reduce_scatter", rank_);
  } else {
    std::vector<torch::Tensor> whole{full};
    impl_->wait(impl_->group->allreduce(whole), "reduce_scatter (all_reduce)", rank_);
    shard.copy_(full.narrow(0, rank_ * n, n));
  }
  shard.div_(size_);
}

void ProcessGroup::barrier() {
  if (size_ == 1) return;
  c10d::BarrierOptions options;
  options.timeout = impl_->timeout;
  impl_->wait(impl_->group->barrier(options), "barrier", rank_);
}

}  // namespace dist
}  // namespace mlo
