//! Cross-checks against rdma-core's mlx5dv.h.
