// Tests of the hypergradient registry: built-in methods by name, a user method, unknown names,
// the options' own YAML keys.

#include <mlo/base/error.h>
#include <mlo/hypergrad.h>

#include <catch2/catch.hpp>

#include <memory>

namespace registry_test {

namespace {

// A user-defined method (the identity map), registered under a name the library does not know.
class Identity : public mlo::Hypergradient {
 public:
  explicit Identity(double scale) : scale_(scale) {}
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, mlo::Level&,
                                mlo::Level&) override {
    std::vector<at::Tensor> out;
    for (const auto& t : v) out.push_back(t * scale_);
    return out;
  }

 private:
  double scale_;
};

struct IdentityOptions : mlo::MethodOptionsFor<IdentityOptions> {
  static constexpr const char* kName = "identity_for_test";
  TORCH_ARG(double, scale) = 1.0;

 public:
  void visit(mlo::Fields& fields) override { fields("scale", scale(), mlo::positive()); }
  std::unique_ptr<mlo::Hypergradient> make() const override {
    return std::make_unique<Identity>(scale());
  }
};
MLO_REGISTER_METHOD(IdentityOptions);

// Another options type under a built-in method's name (never registered: refused).
struct OtherIdentityOptions : mlo::MethodOptionsFor<OtherIdentityOptions> {
  static constexpr const char* kName = "other_identity_for_test";
  std::unique_ptr<mlo::Hypergradient> make() const override {
    return std::make_unique<Identity>(1.0);
  }
};

// Another options type under OtherIdentityOptions's name.
struct SecondIdentityOptions : mlo::MethodOptionsFor<SecondIdentityOptions> {
  static constexpr const char* kName = "other_identity_for_test";
  std::unique_ptr<mlo::Hypergradient> make() const override {
    return std::make_unique<Identity>(2.0);
  }
};

}  // namespace

TEST_CASE("Registry: the built-in methods are registered and built from their options",
          "[hypergrad]") {
  using mlo::ProblemConfig;
  const auto names = mlo::method_names();
  for (const char* name : {"cg", "darts", "neumann", "sama", "unrolled"}) {
    CAPTURE(name);
    CHECK(std::find(names.begin(), names.end(), name) != names.end());
    CHECK(ProblemConfig().method(name).method().name() == name);
  }

  auto sama = ProblemConfig().method(mlo::SamaOptions().alpha(0.2)).method().make();
  REQUIRE(dynamic_cast<mlo::hypergrad::Sama*>(sama.get()) != nullptr);
  CHECK(dynamic_cast<mlo::hypergrad::Sama*>(sama.get())->options().alpha() == 0.2);
  auto unrolled =
      ProblemConfig()
          .method(mlo::UnrolledOptions().checkpointing(mlo::UnrollCheckpointing::kBinomial).snapshots(5))
          .method()
          .make();
  REQUIRE(dynamic_cast<mlo::hypergrad::Unrolled*>(unrolled.get()) != nullptr);
  CHECK(dynamic_cast<mlo::hypergrad::Unrolled*>(unrolled.get())->options().snapshots() == 5);

  const ProblemConfig darts_config = ProblemConfig().method(mlo::DartsOptions().alpha(0.1));
  REQUIRE(darts_config.method_as<mlo::DartsOptions>() != nullptr);
  CHECK(darts_config.method_as<mlo::DartsOptions>()->alpha() == 0.1);
  CHECK(darts_config.method_as<mlo::NeumannOptions>() == nullptr);
  auto darts = darts_config.method().make();
  REQUIRE(dynamic_cast<mlo::hypergrad::Darts*>(darts.get()) != nullptr);
  CHECK(dynamic_cast<mlo::hypergrad::Darts*>(darts.get())->options().alpha() == 0.1);

  auto neumann =
      ProblemConfig().method(mlo::NeumannOptions().iterations(7).alpha(0.2)).method().make();
  REQUIRE(dynamic_cast<mlo::hypergrad::Neumann*>(neumann.get()) != nullptr);
  CHECK(dynamic_cast<mlo::hypergrad::Neumann*>(neumann.get())->options().iterations() == 7);

  auto cg = ProblemConfig().method(mlo::CGOptions().iterations(3)).method().make();
  REQUIRE(dynamic_cast<mlo::hypergrad::CG*>(cg.get()) != nullptr);
  CHECK(dynamic_cast<mlo::hypergrad::CG*>(cg.get())->options().iterations() == 3);

  // The default config selects DARTS with its defaults.
  CHECK(ProblemConfig().method().name() == "darts");
  CHECK(dynamic_cast<mlo::hypergrad::Darts*>(ProblemConfig().method().make().get()) != nullptr);
}

TEST_CASE("Registry: copies of a config keep the options they were given", "[hypergrad]") {
  mlo::ProblemConfig a = mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(4));
  const mlo::ProblemConfig b = a;
  a.method(mlo::NeumannOptions().iterations(9));
  CHECK(b.method_as<mlo::NeumannOptions>()->iterations() == 4);
  CHECK(a.method_as<mlo::NeumannOptions>()->iterations() == 9);
}

TEST_CASE("Registry: a user method registers by name and is built from its options",
          "[hypergrad]") {
  const auto names = mlo::method_names();
  CHECK(std::find(names.begin(), names.end(), "identity_for_test") != names.end());
  const mlo::ProblemConfig config = mlo::ProblemConfig().method(IdentityOptions().scale(3));
  auto method = config.method().make();
  REQUIRE(dynamic_cast<Identity*>(method.get()) != nullptr);
  // Selected by name, it has its registered defaults.
  CHECK(mlo::ProblemConfig().method("identity_for_test").method_as<IdentityOptions>()->scale() ==
        1.0);
  // Its YAML keys are the ones its options describe.
  IdentityOptions options;
  options.scale(2.5);
  const auto values = mlo::field_values([&](mlo::Fields& f) { options.visit(f); });
  REQUIRE(values.size() == 1);
  CHECK(values.at("scale") == "2.5");
}

TEST_CASE("Registry: an unknown method name is an mlo::Error listing the registered ones",
          "[hypergrad]") {
  CHECK_THROWS_AS(mlo::ProblemConfig().method("fixed_point_typo"), mlo::Error);
  // (the list holds whatever this program registered, in name order; other cases add names, and
  // a build that loads libmlo_run adds its methods, first_order)
  CHECK_THROWS_WITH(mlo::ProblemConfig().method("fixed_point_typo"),
                    Catch::Contains("unknown hypergradient method 'fixed_point_typo'; "
                                    "registered hypergradient methods: cg, darts, ") &&
                        Catch::Contains(", forward, identity_for_test, ") &&
                        Catch::Contains(", neumann, sama, unrolled"));
}

TEST_CASE("Registry: an empty factory or name is rejected", "[hypergrad]") {
  CHECK_THROWS_AS(mlo::register_method("empty_for_test", nullptr), mlo::Error);
  CHECK_THROWS_AS(mlo::register_method("", [] { return std::make_shared<IdentityOptions>(); }),
                  mlo::Error);
  const auto names = mlo::method_names();
  CHECK(std::find(names.begin(), names.end(), "empty_for_test") == names.end());
}

TEST_CASE("Registry: a factory whose options carry another name is refused", "[hypergrad]") {
  CHECK_THROWS_WITH(
      mlo::register_method("misnamed_for_test", [] { return std::make_shared<IdentityOptions>(); }),
      Catch::Contains("options named 'identity_for_test'"));
  CHECK_THROWS_WITH(mlo::method_options("misnamed_for_test"),
                    Catch::Contains("unknown hypergradient method 'misnamed_for_test'"));
}

TEST_CASE("Registry: a name is held by one options type; the defaults it hands out stay",
          "[hypergrad]") {
  const mlo::MethodOptions& before = mlo::registered_defaults("darts");
  const auto darts_factory = [] { return std::make_shared<mlo::DartsOptions>(); };
  CHECK(mlo::register_method("darts", darts_factory));  // the same type: accepted, first kept
  CHECK(&mlo::registered_defaults("darts") == &before);
  // Another type under a registered name makes the name an error where it is used, naming
  // both types: configs could not tell them apart. (Registrations run before main, where an
  // exception would end the program without a word.)
  CHECK(mlo::register_method("other_identity_for_test",
                             [] { return std::make_shared<OtherIdentityOptions>(); }));
  CHECK(mlo::register_method("other_identity_for_test",
                             [] { return std::make_shared<SecondIdentityOptions>(); }));
  CHECK_THROWS_WITH(mlo::method_options("other_identity_for_test"),
                    Catch::Contains("the hypergradient method 'other_identity_for_test' is "
                                    "registered twice, by two different types"));
  CHECK_THROWS_WITH(mlo::register_method("identity_for_test", darts_factory),
                    Catch::Contains("options named 'darts'"));
  // The same type again (a header registering it, included by two files) keeps the first.
  CHECK(mlo::register_method("identity_for_test", [] {
    return std::make_shared<IdentityOptions>(IdentityOptions().scale(3.0));
  }));
  const auto* identity =
      dynamic_cast<const IdentityOptions*>(&mlo::registered_defaults("identity_for_test"));
  REQUIRE(identity != nullptr);
  CHECK(identity->scale() == 1.0);
  CHECK(dynamic_cast<const IdentityOptions*>(mlo::method_options("identity_for_test").get())
            ->scale() == 1.0);
  // A config that selects no method reads the registered defaults, the same object each time.
  CHECK(&mlo::ProblemConfig().method() == &before);
  CHECK(mlo::ProblemConfig().method().name() == "darts");
}

}  // namespace registry_test
