// Tests of mlo::nn::Chain: block order, ranges, names and groups, executor, clone, errors.

#include <mlo/base/error.h>
#include <mlo/nn/chain.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace chain_test {

namespace {

// stem -> act -> layer1.0 -> layer1.1 -> head on [N, 4] inputs.
mlo::nn::Chain make_toy() {
  torch::manual_seed(0);
  mlo::nn::Chain chain;
  chain->push_back("stem", torch::nn::Linear(4, 8))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("layer1.0", torch::nn::Linear(8, 8))
      .push_back("layer1.1", torch::nn::Linear(8, 8))
      .push_back("head", torch::nn::Linear(8, 2));
  return chain;
}

}  // namespace

TEST_CASE("Chain: forward equals forward_range and every split of it", "[nn]") {
  mlo::nn::Chain chain = make_toy();
  const torch::Tensor x = torch::randn({3, 4});
  const torch::Tensor y = chain->forward(x);
  REQUIRE(y.sizes() == torch::IntArrayRef({3, 2}));
  // Same ops in the same order: bitwise equal.
  CHECK(torch::equal(chain->forward_range(x, 0, chain->size()), y));
  for (std::size_t split = 0; split <= chain->size(); ++split) {
    CAPTURE(split);
    const torch::Tensor h = chain->forward_range(x, 0, split);
    CHECK(torch::equal(chain->forward_range(h, split, chain->size()), y));
  }
  CHECK(torch::equal(chain->forward_range(x, 2, 2), x));
  torch::Tensor z = x;
  for (std::size_t i = 0; i < chain->size(); ++i) z = chain->block(i).forward(z);
  CHECK(torch::equal(z, y));
  CHECK(torch::equal(chain->forward_block(0, x), chain->forward_range(x, 0, 1)));
}

TEST_CASE("Chain: names, groups and parameter order", "[nn]") {
  mlo::nn::Chain chain = make_toy();
  REQUIRE(chain->size() == 5);
  CHECK(chain->block_names() ==
        std::vector<std::string>{"stem", "act", "layer1.0", "layer1.1", "head"});
  CHECK(chain->block_name(2) == "layer1.0");
  CHECK(chain->index_of("layer1.1") == std::optional<std::size_t>(3));
  CHECK_FALSE(chain->index_of("nope").has_value());

  // Dotted names nest like torchvision: layer1.0.weight.
  const auto named = chain->named_parameters();
  CHECK(named.contains("stem.weight"));
  CHECK(named.contains("layer1.0.weight"));
  CHECK(named.contains("layer1.1.bias"));
  CHECK(named.contains("head.bias"));

  // parameters() of the chain is the union of the blocks' parameters, in block order.
  std::vector<torch::Tensor> expected;
  for (std::size_t i = 0; i < chain->size(); ++i) {
    for (const auto& p : chain->block_module(i)->parameters()) expected.push_back(p);
  }
  const auto params = chain->parameters();
  const auto ranged = chain->range_parameters(0, chain->size());
  REQUIRE(params.size() == expected.size());
  REQUIRE(ranged.size() == expected.size());
  for (std::size_t k = 0; k < params.size(); ++k) {
    CAPTURE(k);
    CHECK(params[k].is_same(expected[k]));
    CHECK(ranged[k].is_same(expected[k]));
  }
  // Blocks 1..3: act (none), layer1.0 and layer1.1 (weight and bias each).
  const auto middle = chain->range_parameters(1, 4);
  REQUIRE(middle.size() == 4);
  CHECK(middle[0].is_same(chain->block_module(2)->parameters()[0]));
  CHECK(chain->range_parameters(1, 2).empty());
  CHECK(chain->range_buffers(0, chain->size()).empty());
  CHECK_THROWS_AS(chain->range_parameters(2, 9), mlo::Error);
}

TEST_CASE("Chain: an executor replaces forward, forward_range stays plain", "[nn]") {
  mlo::nn::Chain chain = make_toy();
  const torch::Tensor x = torch::randn({3, 4});
  const torch::Tensor plain = chain->forward(x);
  int calls = 0;
  chain->set_executor([&calls](mlo::nn::ChainImpl& c, const torch::Tensor& input) {
    ++calls;
    return c.forward_range(c.forward_range(input, 0, 2), 2, c.size());
  });
  CHECK(chain->has_executor());
  CHECK(torch::equal(chain->forward(x), plain));
  CHECK(calls == 1);
  chain->forward_range(x, 0, chain->size());
  CHECK(calls == 1);
  chain->clear_executor();
  CHECK_FALSE(chain->has_executor());
  chain->forward(x);
  CHECK(calls == 1);
}

TEST_CASE("Chain: clone is a deep copy with the same names", "[nn]") {
  mlo::nn::Chain chain = make_toy();
  auto copy = std::dynamic_pointer_cast<mlo::nn::ChainImpl>(chain->clone());
  REQUIRE(copy);
  CHECK(copy->block_names() == chain->block_names());
  const auto a = chain->named_parameters(), b = copy->named_parameters();
  REQUIRE(a.size() == b.size());
  for (const auto& item : a) {
    CAPTURE(item.key());
    REQUIRE(b.contains(item.key()));
    CHECK(torch::equal(item.value(), b[item.key()]));
    CHECK_FALSE(item.value().data_ptr() == b[item.key()].data_ptr());
  }
  const torch::Tensor x = torch::randn({2, 4});
  CHECK(torch::equal(copy->forward(x), chain->forward(x)));
}

TEST_CASE("Chain: bad names and ranges throw mlo::Error", "[nn]") {
  mlo::nn::Chain chain = make_toy();
  CHECK_THROWS_AS(chain->push_back("stem", torch::nn::Linear(2, 2)), mlo::Error);
  CHECK_THROWS_AS(chain->push_back("", torch::nn::Linear(2, 2)), mlo::Error);
  CHECK_THROWS_AS(chain->push_back("a..b", torch::nn::Linear(2, 2)), mlo::Error);
  // layer1's blocks must be contiguous (head came after them).
  CHECK_THROWS_WITH(chain->push_back("layer1.2", torch::nn::Linear(2, 2)),
                    Catch::Contains("contiguous"));
  // A group cannot take the name of a block, nor a block the name of a group.
  CHECK_THROWS_AS(chain->push_back("head.0", torch::nn::Linear(2, 2)), mlo::Error);
  CHECK_THROWS_AS(chain->push_back("layer1", torch::nn::Linear(2, 2)), mlo::Error);
  CHECK_THROWS_AS(chain->push_back("x", torch::nn::AnyModule()), mlo::Error);
  CHECK(chain->size() == 5);

  const torch::Tensor x = torch::randn({1, 4});
  CHECK_THROWS_AS(chain->forward_range(x, 3, 2), mlo::Error);
  CHECK_THROWS_AS(chain->forward_range(x, 0, 6), mlo::Error);
  CHECK_THROWS_AS(chain->block(5), mlo::Error);
  CHECK_THROWS_AS(chain->block_name(5), mlo::Error);

  // An empty chain is the identity.
  mlo::nn::Chain empty;
  CHECK(empty->is_empty());
  CHECK(torch::equal(empty->forward(x), x));
}

}  // namespace chain_test
