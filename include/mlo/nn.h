#pragma once
/// \file
/// Umbrella header of the nn area: `Chain` (models as chains of blocks), the CIFAR ResNets and
/// their residual blocks, the Meta-Weight-Net reweighting MLP, the small Fashion-MNIST CNN, and
/// models by name (the registry).

#include <mlo/nn/activations.h>
#include <mlo/nn/batch_norm.h>
#include <mlo/nn/chain.h>
#include <mlo/nn/cnn.h>
#include <mlo/nn/mwn.h>
#include <mlo/nn/registry.h>
#include <mlo/nn/residual.h>
#include <mlo/nn/resnet.h>
