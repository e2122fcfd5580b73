// Batch transforms: flip flips, crop is a shifted window of the reflect-padded image,
// normalization is exact per channel, everything deterministic given the generator's seed.
#include <mlo/base/error.h>
#include <mlo/data/transforms.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

namespace transforms_test {

using Catch::Matchers::Contains;
namespace data = mlo::data;

namespace {

at::Generator seeded(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

torch::Tensor batch(int64_t n = 16, int64_t c = 3, int64_t size = 32) {
  auto gen = seeded(99);
  return torch::rand({n, c, size, size}, gen);
}

}  // namespace

TEST_CASE("Transforms: horizontal flip mirrors the chosen images, keeps the others",
          "[data][transforms]") {
  const auto x = batch();
  auto gen = seeded(1);
  const auto y = data::random_horizontal_flip(x, gen);
  int64_t flipped = 0;
  for (int64_t i = 0; i < x.size(0); ++i) {
    const bool is_flipped = torch::equal(y[i], x[i].flip({2}));
    INFO("image " << i);
    CHECK((is_flipped || torch::equal(y[i], x[i])));
    flipped += is_flipped;
  }
  // p = 0.5 over 16 images: both outcomes occur for this seed.
  CHECK(flipped > 0);
  CHECK(flipped < x.size(0));
  auto always = seeded(2);
  CHECK(torch::equal(data::random_horizontal_flip(x, always, 1.0), x.flip({3})));
}

TEST_CASE("Transforms: random crop is a window of the reflect-padded image", "[data][transforms]") {
  const auto x = batch();
  auto gen = seeded(3);
  const auto y = data::random_crop(x, 32, 4, gen);
  REQUIRE(y.sizes() == x.sizes());
  // Reflect padding by hand: padded index p maps to source |p - 4| mirrored at the far edge.
  auto source = [](int64_t p) {
    int64_t i = p - 4;
    if (i < 0) i = -i;
    if (i > 31) i = 62 - i;
    return i;
  };
  std::vector<int64_t> map(40);
  for (int64_t p = 0; p < 40; ++p) map[p] = source(p);
  const auto index = torch::tensor(map);
  const auto padded = x.index_select(2, index).index_select(3, index);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t i = 0; i < x.size(0); ++i) {
    bool found = false;
    for (int64_t dy = 0; dy <= 8 && !found; ++dy)
      for (int64_t dx = 0; dx <= 8 && !found; ++dx)
        if (torch::equal(y[i], padded[i].narrow(1, dy, 32).narrow(2, dx, 32))) {
          found = true;
          offsets.insert({dy, dx});
        }
    INFO("image " << i << " is no window of its padded image");
    CHECK(found);
  }
  CHECK(offsets.size() > 1);  // offsets vary between images

  auto small = seeded(4);
  CHECK(data::random_crop(x, 28, 0, small).sizes() == torch::IntArrayRef({16, 3, 28, 28}));
  REQUIRE_THROWS_WITH(data::random_crop(x, 48, 4, small), Contains("size 48 does not fit"));
  REQUIRE_THROWS_WITH(data::random_crop(x.to(torch::kUInt8), 32, 4, small),
                      Contains("expects float images"));
}

TEST_CASE("Transforms: normalization per channel", "[data][transforms]") {
  const auto x = batch(4, 3, 8);
  const std::vector<double> mean = {0.4914, 0.4822, 0.4465}, std = {0.2470, 0.2435, 0.2616};
  const auto y = data::normalize(x, mean, std);
  // Tolerance 1e-6: float arithmetic against a double reference.
  const auto xd = x.to(torch::kDouble);
  for (int64_t c = 0; c < 3; ++c) {
    const auto expected = (xd.select(1, c) - mean[c]) / std[c];
    INFO("channel " << c);
    CHECK((y.select(1, c).to(torch::kDouble) - expected).abs().max().item<double>() < 1e-6);
  }
  REQUIRE_THROWS_WITH(data::normalize(x, {0.5}, {0.5}),
                      Contains("one mean and one std per channel (3)"));
}

TEST_CASE("Transforms: presets, determinism and uint8 conversion", "[data][transforms]") {
  const auto train = data::make_transform(data::TransformOptions::cifar10(/*train=*/true));
  const auto x = batch();
  auto g1 = seeded(7), g2 = seeded(7), g3 = seeded(8);
  const auto a = train(x, g1), b = train(x, g2), c = train(x, g3);
  CHECK(a.sizes() == x.sizes());
  CHECK(torch::equal(a, b));
  CHECK_FALSE(torch::equal(a, c));

  // Test-time CIFAR transform is only the normalization.
  auto g = seeded(0);
  const auto test = data::make_transform(data::TransformOptions::cifar10(false))(x, g);
  CHECK(torch::allclose(test,
                        data::normalize(x, {0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616})));

  const auto fm = data::TransformOptions::fashion_mnist(true);
  CHECK(fm.crop() == 28);
  CHECK(fm.mean() == std::vector<double>{0.2860});
  auto gf = seeded(0);
  CHECK(data::make_transform(fm)(batch(4, 1, 28), gf).sizes() ==
        torch::IntArrayRef({4, 1, 28, 28}));

  const auto bytes = torch::tensor(std::vector<uint8_t>{0, 51, 255});
  CHECK(torch::allclose(data::to_float(bytes), torch::tensor(std::vector<float>{0, 0.2f, 1})));
}

}  // namespace transforms_test
