# SPDX-License-Identifier: MIT
INTEG_TESTS += test/integration/test_config.sh test/integration/test_docs.sh test/integration/test_lifetimes.sh \
               test/integration/test_symbols.sh test/integration/test_ze_routes.sh \
               test/integration/test_ze_mpi.sh test/integration/test_ze_stats.sh \
               test/integration/test_stats_job.sh test/integration/test_package.sh \
               test/integration/test_slurm.sh test/integration/test_doctor.sh test/integration/test_logs.sh \
               test/integration/test_cudadrv.sh test/integration/test_cuda.sh \
               test/integration/test_zedrv.sh test/integration/test_ze_newer.sh \
               test/integration/test_launch_trust.sh test/integration/test_layout.sh
