# SPDX-License-Identifier: MIT
LIB_SRC += $(wildcard shim/*.c)
