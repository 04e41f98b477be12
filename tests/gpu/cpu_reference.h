// cpu_reference.h: the CPU implementations (runtime/*.c, layers/*.c, attention/naive.c)
// declared for a CUDA test under the names they are linked with: every function and variable
// of runtime/device.h, layers.h and attention.h prefixed cpu_, with floatX = float (as
// cpu_floatX). The Makefile joins the CPU objects into one and prefixes every symbol it defines
// (CPU_REF_OBJ, prefix_symbols); the same names, as #defines in the generated
// cpu_reference_names.h, rename the declarations while those headers are read a second time
// here. Nothing is copied: a new layer or a changed signature needs no edit; a type those
// headers define is renamed here by hand (cpu_DecodeLayerWeights: its pointers are to
// cpu_floatX). Include it after the headers of the CUDA side.
#ifndef CPU_REFERENCE_H
#define CPU_REFERENCE_H

#include "../../attention/attention.h"   // the CUDA side's declarations first, included once

#pragma push_macro("BACKEND_CUDA")
#pragma push_macro("FLOATX_NAME")
#undef BACKEND_CUDA
#undef FLOATX_NAME
#undef RUNTIME_DEVICE_H
#undef LAYERS_H
#undef ATTENTION_H
#define floatX cpu_floatX
#define DecodeLayerWeights cpu_DecodeLayerWeights
#include "cpu_reference_names.h"
#include "../../attention/attention.h"
#define CPU_REFERENCE_UNDEF
#include "cpu_reference_names.h"
#undef CPU_REFERENCE_UNDEF
#undef DecodeLayerWeights
#undef floatX
#pragma pop_macro("FLOATX_NAME")
#pragma pop_macro("BACKEND_CUDA")

#endif
