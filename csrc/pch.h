// Precompiled header for csrc/: the heavy torch headers nearly every file uses.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
