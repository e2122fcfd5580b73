#pragma once
/// \file
/// Image-classification datasets by name, for any experiment and a user's program: each entry
/// loads its train and test splits into memory, says where its files are by default and whether
/// they are present, where its files are published (for downloads) and gives its normalization.
/// Built in: `fashion_mnist`, `cifar10`, `synthetic` (CIFAR-shaped, seeded). A program adds its
/// own with `MLO_REGISTER_DATASET(Class)` (a class with its name, `kName`, and
/// `static DatasetEntry entry()`) or `register_dataset`, under the registry's rule for names
/// (base/registry.h).
///
/// ```
/// auto data = mlo::data::load_dataset("cifar10", mlo::data::DatasetRequest());
/// auto transform = mlo::data::make_transform(mlo::data::dataset_transform("cifar10", true));
/// ```

#include <mlo/base/registry.h>
#include <mlo/data/download.h>
#include <mlo/data/transforms.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <vector>

namespace mlo {
namespace data {

/// A dataset in memory: images [N, C, H, W] (uint8) and targets [N] (int64) of each split.
struct ImageDataset {
  at::Tensor train_images;   ///< the training split's images, [N, C, H, W] uint8
  at::Tensor train_targets;  ///< the training split's labels, [N] int64
  at::Tensor test_images;    ///< the test split's images, [M, C, H, W] uint8
  at::Tensor test_targets;   ///< the test split's labels, [M] int64
  /// The class names by label ("t-shirt/top", ...; "class0" ... for generated data).
  std::vector<std::string> class_names;
  /// For logs: what was loaded and from where ("CIFAR-10 (data/cifar-10-batches-bin)").
  std::string description;
  /// Generated, not real data (results on it say nothing about the real task).
  bool synthetic = false;
};

/// What a loader is asked for.
struct DatasetRequest {
  /// Folder of the files; "" uses the dataset's default (`DatasetEntry::default_root`).
  std::string root;
  /// Seed of generated datasets (the test split is another sample, seed + 1000, of the same
  /// classes).
  uint64_t seed = 0;
  /// Generated datasets: images per class of the training split.
  int64_t synthetic_per_class = 600;
  /// Generated datasets: images per class of the test split.
  int64_t synthetic_test_per_class = 100;
};

/// One registered dataset.
struct DatasetEntry {
  /// Loads both splits; throws `mlo::Error` naming the missing file.
  std::function<ImageDataset(const DatasetRequest&)> load;
  /// Whether its files are under `root` (a resolved folder); null: always (generated data).
  std::function<bool(const std::string& root)> present;
  /// Its folder when a request names none ("" for generated data).
  std::string default_root;
  /// Its normalization and augmentation for training (`true`) or evaluation (`false`).
  std::function<TransformOptions(bool train)> transform;
  /// The class names by label, known before loading (configs check class metrics against
  /// them); empty when only loading tells.
  std::vector<std::string> class_names;
  /// Its published files and their checksums, for `prepare_dataset(..., download=true)`; no
  /// files: it cannot be downloaded.
  DownloadSource source;
  /// Where a download goes when the request names no root and `default_root` lacks the files;
  /// "" = `default_root`. Looked in too: `dataset_root` resolves an empty root to it when the
  /// files are there and not in `default_root` (Fashion-MNIST's default is Debian's package
  /// folder, which a download does not write).
  std::string download_root;
  /// How to get the files by hand, for the error that says they are missing ("apt-get install
  /// dataset-fashion-mnist", an address to download from).
  std::string how_to_get;
};

/// Registers `entry` as `name`, the dataset the type `type` defines, at `where`; returns true.
/// The same type again is a no-op; another under a taken name makes that name an error.
bool register_dataset(const std::string& name, std::type_index type, DatasetEntry entry,
                      const std::string& where);
/// Registers `entry` as `name`, by value (no type: a taken name is an error); returns true.
bool register_dataset(const std::string& name, DatasetEntry entry);
/// The registered datasets' names, sorted.
std::vector<std::string> dataset_names();
/// The entry of `name`; throws `mlo::Error` listing the registered names for an unknown one.
const DatasetEntry& dataset_entry(const std::string& name);
/// `root`, or when it is empty the dataset's default folder (its `download_root` instead when
/// the files are there and not in the default folder).
std::string dataset_root(const std::string& name, const std::string& root);
/// Whether the files of `name` are under `dataset_root(name, root)`.
bool dataset_present(const std::string& name, const std::string& root);
/// The folder that holds the files of `name`, fetching them first when they are missing and
/// `download` is set.
///
/// `root` is resolved with `dataset_root`; a download goes into `root`, or into the entry's
/// `download_root` when `root` is empty (see `download` for what it checks and that it leaves
/// nothing half-written). Without `download`, missing files are an `mlo::Error` that says where
/// they were looked for, the key that fetches them (`data.download: true`) and the entry's
/// `how_to_get`. Generated datasets are always ready.
std::string prepare_dataset(const std::string& name, const std::string& root, bool download,
                            const DownloadOptions& options = DownloadOptions());
/// Loads `name` (`request.root` resolved with `dataset_root`).
ImageDataset load_dataset(const std::string& name, DatasetRequest request);
/// The transform options of `name` for training or evaluation.
TransformOptions dataset_transform(const std::string& name, bool train);

namespace detail {
/// `register_dataset` for a class `Class` with `kName` and `static DatasetEntry entry()`.
template <typename Class>
bool register_dataset_type(const char* file, int line) {
  return register_dataset(Class::kName, std::type_index(typeid(Class)), Class::entry(),
                          registered_at(file, line));
}
}  // namespace detail

}  // namespace data
}  // namespace mlo

/// Registers the dataset that the class `Class` (with `kName` and `static DatasetEntry entry()`)
/// defines, at load time, at namespace scope in a source file: `data.dataset: <kName>`.
#define MLO_REGISTER_DATASET(Class) \
  MLO_REGISTRATION(::mlo::data::detail::register_dataset_type<Class>(__FILE__, __LINE__))
