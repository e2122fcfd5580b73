#pragma once
/// \file
/// Umbrella header of the nn area: `Chain` (models as chains of blocks), the CIFAR ResNets and
/// their residual blocks, the Meta-Weight-Net reweighting MLP, and the small Fashion-MNIST CNN.

#include <mlo/nn/activations.h>
#include <mlo/nn/chain.h>
#include <mlo/nn/cnn.h>
#include <mlo/nn/mwn.h>
#include <mlo/nn/residual.h>
#include <mlo/nn/resnet.h>
