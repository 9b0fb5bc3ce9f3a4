//! mlx5 direct path (work in progress).
#![no_std]
