/*
 * mlx5dv.h's SSSE3 variant of mlx5dv_set_ctrl_seg, which exists only when the header is
 * compiled with SSE3 enabled. This file alone is built with -mssse3; the Rust side calls it
 * only after checking at run time that the CPU has SSSE3.
 */
#include <stdint.h>

#include <infiniband/mlx5dv.h>

#if !defined(__SSSE3__)
#error "probe_x86.c must be compiled with -mssse3"
#endif

/* `imm` is the host value, given to the helper big-endian (see zv_set_ctrl_seg). */
void zv_x86_set_ctrl_seg(void *buf, uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qpn,
			 uint8_t fm_ce_se, uint8_t ds, uint8_t signature, uint32_t imm)
{
	mlx5dv_x86_set_ctrl_seg(buf, pi, opcode, opmod, qpn, fm_ce_se, ds, signature,
				htobe32(imm));
}
