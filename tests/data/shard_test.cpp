// Sharded LoaderStreams (data parallelism): the ranks' slices together are exactly the 1-process
// batches, before and after save/load, and across a change of world size.
#include <mlo/base/error.h>
#include <mlo/data/stream.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <sstream>

namespace shard_test {

using Catch::Matchers::Contains;
using mlo::data::LoaderOptions;
using mlo::data::LoaderStream;
using mlo::data::Shard;

namespace {

// n images whose pixels all equal their index (uint8), label = index % 7.
std::pair<torch::Tensor, torch::Tensor> toy(int64_t n) {
  auto images =
      torch::arange(n, torch::kUInt8).view({n, 1, 1, 1}).expand({n, 1, 2, 2}).contiguous();
  return {images, torch::arange(n, torch::kLong).remainder(7)};
}

// The global batch: the ranks' batches concatenated in rank order.
mlo::Batch gather(std::vector<LoaderStream>& ranks) {
  std::vector<at::Tensor> data, target;
  for (auto& rank : ranks) {
    const auto b = rank.next();
    data.push_back(b.data);
    target.push_back(b.target);
  }
  return mlo::Batch(torch::cat(data), torch::cat(target));
}

std::vector<LoaderStream> make_ranks(const at::Tensor& images, const at::Tensor& targets,
                                     LoaderOptions options, int64_t world) {
  std::vector<LoaderStream> ranks;
  for (int64_t r = 0; r < world; ++r) {
    ranks.emplace_back(images, targets, LoaderOptions(options).shard(Shard{r, world}));
  }
  return ranks;
}

std::string saved(const LoaderStream& stream) {
  torch::serialize::OutputArchive out;
  stream.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  return bytes.str();
}

void load(LoaderStream& stream, const std::string& bytes) {
  std::istringstream in_bytes(bytes);
  torch::serialize::InputArchive in;
  in.load_from(in_bytes);
  stream.load(in);
}

void check_same(const mlo::Batch& got, const mlo::Batch& expected, int batch) {
  INFO("global batch " << batch);
  REQUIRE(got.size() == expected.size());
  CHECK(torch::equal(got.data, expected.data));
  CHECK(torch::equal(got.target, expected.target));
}

}  // namespace

TEST_CASE("shard_range: contiguous slices of the global batch, divisibility required",
          "[data][shard]") {
  CHECK(mlo::data::shard_range(12, Shard{0, 3}) == std::make_pair<int64_t, int64_t>(0, 4));
  CHECK(mlo::data::shard_range(12, Shard{2, 3}) == std::make_pair<int64_t, int64_t>(8, 12));
  CHECK(mlo::data::shard_range(5, Shard{0, 1}) == std::make_pair<int64_t, int64_t>(0, 5));
  REQUIRE_THROWS_WITH(mlo::data::shard_range(10, Shard{0, 4}),
                      Contains("global batch size 10 is not a multiple of the world size 4"));
  REQUIRE_THROWS_WITH(mlo::data::shard_range(8, Shard{2, 2}), Contains("rank 2 of world_size 2"));
  auto [images, targets] = toy(20);
  const mlo::Batch batch(images.to(torch::kFloat), targets);
  const auto slice = mlo::data::shard_batch(batch, Shard{1, 4});
  CHECK(torch::equal(slice.target, targets.slice(0, 5, 10)));
}

TEST_CASE("Sharded LoaderStream: the ranks' slices are the 1-process batches, over epochs",
          "[data][shard]") {
  auto [images, targets] = toy(24);
  for (int64_t world : {2, 3, 4}) {
    INFO("world size " << world);
    const auto options = LoaderOptions(12).seed(5);
    LoaderStream single(images, targets, options);
    auto ranks = make_ranks(images, targets, options, world);
    CHECK(ranks[1].local_batch_size() == 12 / world);
    for (int b = 0; b < 6; ++b) check_same(gather(ranks), single.next(), b);  // 3 epochs
    CHECK(ranks.back().epoch() == 2);
  }
}

TEST_CASE("Sharded LoaderStream: save/load is world-size independent", "[data][shard]") {
  auto [images, targets] = toy(30);
  const auto options = LoaderOptions(8).seed(9).drop_last(true);  // 3 batches, 6 samples left
  LoaderStream reference(images, targets, options);
  std::vector<mlo::Batch> expected;
  for (int i = 0; i < 10; ++i) expected.push_back(reference.next());

  // 2 ranks draw 4 global batches, save (rank 0's position), and 4 ranks resume from it.
  auto two = make_ranks(images, targets, options, 2);
  for (int i = 0; i < 4; ++i) check_same(gather(two), expected[i], i);
  const std::string position = saved(two[0]);
  CHECK(position == saved(two[1]));  // every rank holds the same (global) position
  auto four = make_ranks(images, targets, options, 4);
  for (auto& rank : four) load(rank, position);
  for (int i = 4; i < 7; ++i) check_same(gather(four), expected[i], i);

  // And back to 1 process from the 4 ranks' position.
  LoaderStream single(images, targets, options);
  load(single, saved(four[2]));
  for (int i = 7; i < 10; ++i) check_same(single.next(), expected[i], i);
}

TEST_CASE("Sharded LoaderStream: uneven batches are refused, augmentations differ per rank",
          "[data][shard]") {
  auto [images, targets] = toy(10);
  REQUIRE_THROWS_WITH(LoaderStream(images, targets, LoaderOptions(5).shard(Shard{0, 2})),
                      Contains("global batch size 5 is not a multiple of the world size 2"));
  // 10 samples in batches of 4: the last batch (2) cannot be split without drop_last.
  REQUIRE_THROWS_WITH(LoaderStream(images, targets, LoaderOptions(4).shard(Shard{1, 2})),
                      Contains("set drop_last"));
  LoaderStream fine(images, targets, LoaderOptions(4).drop_last(true).shard(Shard{1, 2}));
  CHECK(fine.next().size() == 2);

  // Noise from the stream's generator: rank 0 of 2 and rank 1 of 2 draw different noise, and
  // a 1-process stream keeps its own (unsharded) seeding.
  mlo::data::Transform noise = [](const at::Tensor& x, at::Generator& gen) {
    return x + torch::rand(x.sizes(), gen, x.options());
  };
  const auto options = LoaderOptions(4).seed(2).shuffle(false).drop_last(true);
  LoaderStream r0(images, targets, LoaderOptions(options).shard(Shard{0, 2}), noise);
  LoaderStream r1(images, targets, LoaderOptions(options).shard(Shard{1, 2}), noise);
  LoaderStream one(images, targets, options, noise);
  const auto b0 = r0.next();
  const auto n0 = b0.data - images.slice(0, 0, 2).to(torch::kFloat) / 255;
  const auto n1 = r1.next().data - images.slice(0, 2, 4).to(torch::kFloat) / 255;
  const auto n = one.next().data - images.slice(0, 0, 4).to(torch::kFloat) / 255;
  CHECK_FALSE(torch::allclose(n0, n1));
  CHECK_FALSE(torch::allclose(n0, n.slice(0, 0, 2)));
  // The same rank redrawn gives the same noise (seeded per (seed, epoch, batch, rank)).
  LoaderStream again(images, targets, LoaderOptions(options).shard(Shard{0, 2}), noise);
  CHECK(torch::equal(again.next().data, b0.data));
}

}  // namespace shard_test
