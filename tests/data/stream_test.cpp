// LoaderStream and SeededSampler: every sample once per epoch, seeded order, exact resume.
#include <mlo/base/error.h>
#include <mlo/data/sampler.h>
#include <mlo/data/stream.h>
#include <mlo/data/subset.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

namespace stream_test {

using Catch::Matchers::Contains;
using mlo::data::LoaderOptions;
using mlo::data::LoaderStream;

namespace {

// 10 images whose pixels all equal their index (uint8), label = index % 3.
std::pair<torch::Tensor, torch::Tensor> toy(int64_t n = 10) {
  auto images =
      torch::arange(n, torch::kUInt8).view({n, 1, 1, 1}).expand({n, 1, 4, 4}).contiguous();
  return {images, torch::arange(n, torch::kLong).remainder(3)};
}

// Which samples a batch holds (pixel value * 255 is the index).
std::vector<int64_t> ids(const mlo::Batch& b) {
  const auto v = b.data.select(1, 0).select(1, 0).select(1, 0).mul(255).round().to(torch::kLong);
  return std::vector<int64_t>(v.data_ptr<int64_t>(), v.data_ptr<int64_t>() + v.numel());
}

}  // namespace

TEST_CASE("LoaderStream: each epoch visits every sample once, reshuffled", "[data][stream]") {
  auto [images, targets] = toy();
  LoaderStream stream(images, targets, LoaderOptions(4).seed(1));
  CHECK(stream.batches_per_epoch() == 3);
  std::vector<std::vector<int64_t>> epochs(2);
  for (int e = 0; e < 2; ++e) {
    for (int b = 0; b < 3; ++b) {
      const auto batch = stream.next();
      CHECK(batch.data.scalar_type() == torch::kFloat);
      CHECK(batch.target.scalar_type() == torch::kLong);
      CHECK(batch.size() == (b < 2 ? 4 : 2));
      const auto i = ids(batch);
      CHECK(torch::equal(batch.target, torch::tensor(i).remainder(3)));
      epochs[e].insert(epochs[e].end(), i.begin(), i.end());
    }
    CHECK(stream.epoch() == e);
  }
  CHECK(epochs[0] != epochs[1]);
  for (auto& e : epochs) {
    std::sort(e.begin(), e.end());
    CHECK(e == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  }
}

TEST_CASE("LoaderStream: drop_last, no shuffle", "[data][stream]") {
  auto [images, targets] = toy();
  LoaderStream stream(images, targets, LoaderOptions(4).shuffle(false).drop_last(true));
  CHECK(stream.batches_per_epoch() == 2);
  CHECK(ids(stream.next()) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(ids(stream.next()) == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(ids(stream.next()) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(stream.epoch() == 1);
  REQUIRE_THROWS_WITH(LoaderStream(images, targets, LoaderOptions(11).drop_last(true)),
                      Contains("batch_size 11 with drop_last exceeds the 10 samples"));
}

TEST_CASE("LoaderStream: same seed same batches, another seed others", "[data][stream]") {
  auto [images, targets] = toy();
  LoaderStream a(images, targets, LoaderOptions(3).seed(5)),
      b(images, targets, LoaderOptions(3).seed(5));
  LoaderStream c(images, targets, LoaderOptions(3).seed(6));
  std::vector<int64_t> sa, sb, sc;
  for (int i = 0; i < 8; ++i) {
    for (auto v : ids(a.next())) sa.push_back(v);
    for (auto v : ids(b.next())) sb.push_back(v);
    for (auto v : ids(c.next())) sc.push_back(v);
  }
  CHECK(sa == sb);
  CHECK(sa != sc);
}

TEST_CASE("LoaderStream: save/load resumes with identical batches, transform included",
          "[data][stream]") {
  auto [images, targets] = toy(23);
  // A random transform: noise from the stream's per-batch generator.
  mlo::data::Transform noisy = [](const at::Tensor& x, at::Generator& gen) {
    return x + torch::rand(x.sizes(), gen, x.options());
  };
  for (bool drop_last : {false, true}) {
    INFO("drop_last " << drop_last);
    const auto options = LoaderOptions(5).seed(11).drop_last(drop_last);
    LoaderStream reference(images, targets, options, noisy);
    std::vector<mlo::Batch> expected;
    for (int i = 0; i < 14; ++i) expected.push_back(reference.next());

    LoaderStream first(images, targets, options, noisy);
    for (int i = 0; i < 7; ++i) first.next();
    torch::serialize::OutputArchive out;
    first.save(out);
    std::ostringstream bytes;
    out.save_to(bytes);

    // A fresh stream, built with another seed: the saved seed wins.
    LoaderStream resumed(images, targets, LoaderOptions(5).seed(999).drop_last(drop_last), noisy);
    std::istringstream in_bytes(bytes.str());
    torch::serialize::InputArchive in;
    in.load_from(in_bytes);
    resumed.load(in);
    for (int i = 7; i < 14; ++i) {
      const auto batch = resumed.next();
      INFO("batch " << i);
      CHECK(torch::equal(batch.data, expected[i].data));
      CHECK(torch::equal(batch.target, expected[i].target));
    }
  }
}

TEST_CASE("LoaderStream: loading a state saved for another dataset size fails", "[data][stream]") {
  auto [images, targets] = toy(10);
  LoaderStream a(images, targets, LoaderOptions(4));
  a.next();
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  auto [more, more_targets] = toy(12);
  LoaderStream b(more, more_targets, LoaderOptions(4));
  std::istringstream in_bytes(bytes.str());
  torch::serialize::InputArchive in;
  in.load_from(in_bytes);
  REQUIRE_THROWS_WITH(b.load(in), Contains("saved for 10 samples, this dataset has 12"));
}

TEST_CASE("SeededSampler: drives a torch::data DataLoader deterministically", "[data][stream]") {
  auto [images, targets] = toy(12);
  auto run = [&, images = images, targets = targets](uint64_t seed) {
    auto dataset = mlo::data::Subset(images, targets, torch::arange(12, torch::kLong))
                       .map(torch::data::transforms::Stack<>());
    auto loader =
        torch::data::make_data_loader(std::move(dataset), mlo::data::SeededSampler(12, seed),
                                      torch::data::DataLoaderOptions(5).workers(2));
    std::vector<int64_t> order;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (auto& batch : *loader)
        for (int64_t i = 0; i < batch.data.size(0); ++i)
          order.push_back(batch.data[i][0][0][0].item<int64_t>());
    return order;
  };
  const auto a = run(3), b = run(3), c = run(4);
  CHECK(a.size() == 24);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(std::vector<int64_t>(a.begin(), a.begin() + 12) !=
        std::vector<int64_t>(a.begin() + 12, a.end()));
}

}  // namespace stream_test
