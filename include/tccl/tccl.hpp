// Umbrella header: everything a tccl user needs.
#pragma once

#include "tccl/communicator.hpp"
#include "tccl/error.hpp"
#include "tccl/stats.hpp"
#include "tccl/store.hpp"
#include "tccl/types.hpp"
#include "tccl/version.hpp"
#include "tccl/work.hpp"
