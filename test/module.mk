# SPDX-License-Identifier: MIT
# Test fragments: each sub-directory owns its own rules. devmem first: the
# test drivers link its object.
-include test/devmem/module.mk
-include test/zedrv/module.mk
-include test/zeldr/module.mk
-include test/mpi/module.mk
-include test/cudadrv/module.mk
-include test/integration/module.mk
-include test/bench/module.mk
-include test/faults/module.mk
-include test/transport/module.mk
-include test/stress/module.mk
