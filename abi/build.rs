//! Compiles a C probe against rdma-core's headers that records the size and alignment of
//! every struct zverbs hands to rdma-core, the offset of every field, and the value of every
//! constant; generates the matching Rust table from the same list.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A struct: its Rust path, the C type, and its fields as `(rust field path, C field path)`;
/// an empty C path means the same as the Rust one. The item's name in the tables is the
/// Rust type's.
type Spec = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const STRUCTS: &[Spec] = &[
    (
        "zverbs_ffi::types::ibv_gid",
        "union ibv_gid",
        &[("raw", "")],
    ),
    (
        "zverbs_ffi::types::ibv_gid_entry",
        "struct ibv_gid_entry",
        &[
            ("gid", ""),
            ("gid_index", ""),
            ("port_num", ""),
            ("gid_type", ""),
            ("ndev_ifindex", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_device_attr",
        "struct ibv_device_attr",
        &[
            ("fw_ver", ""),
            ("node_guid", ""),
            ("sys_image_guid", ""),
            ("max_mr_size", ""),
            ("page_size_cap", ""),
            ("vendor_id", ""),
            ("vendor_part_id", ""),
            ("hw_ver", ""),
            ("max_qp", ""),
            ("max_qp_wr", ""),
            ("device_cap_flags", ""),
            ("max_sge", ""),
            ("max_sge_rd", ""),
            ("max_cq", ""),
            ("max_cqe", ""),
            ("max_mr", ""),
            ("max_pd", ""),
            ("max_qp_rd_atom", ""),
            ("max_ee_rd_atom", ""),
            ("max_res_rd_atom", ""),
            ("max_qp_init_rd_atom", ""),
            ("max_ee_init_rd_atom", ""),
            ("atomic_cap", ""),
            ("max_ee", ""),
            ("max_rdd", ""),
            ("max_mw", ""),
            ("max_raw_ipv6_qp", ""),
            ("max_raw_ethy_qp", ""),
            ("max_mcast_grp", ""),
            ("max_mcast_qp_attach", ""),
            ("max_total_mcast_qp_attach", ""),
            ("max_ah", ""),
            ("max_fmr", ""),
            ("max_map_per_fmr", ""),
            ("max_srq", ""),
            ("max_srq_wr", ""),
            ("max_srq_sge", ""),
            ("max_pkeys", ""),
            ("local_ca_ack_delay", ""),
            ("phys_port_cnt", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_port_attr",
        "struct ibv_port_attr",
        &[
            ("state", ""),
            ("max_mtu", ""),
            ("active_mtu", ""),
            ("gid_tbl_len", ""),
            ("port_cap_flags", ""),
            ("max_msg_sz", ""),
            ("bad_pkey_cntr", ""),
            ("qkey_viol_cntr", ""),
            ("pkey_tbl_len", ""),
            ("lid", ""),
            ("sm_lid", ""),
            ("lmc", ""),
            ("max_vl_num", ""),
            ("sm_sl", ""),
            ("subnet_timeout", ""),
            ("init_type_reply", ""),
            ("active_width", ""),
            ("active_speed", ""),
            ("phys_state", ""),
            ("link_layer", ""),
            ("flags", ""),
            ("port_cap_flags2", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_wc",
        "struct ibv_wc",
        &[
            ("wr_id", ""),
            ("status", ""),
            ("opcode", ""),
            ("vendor_err", ""),
            ("byte_len", ""),
            ("imm_data", ""),
            ("imm_data", "invalidated_rkey"),
            ("qp_num", ""),
            ("src_qp", ""),
            ("wc_flags", ""),
            ("pkey_index", ""),
            ("slid", ""),
            ("sl", ""),
            ("dlid_path_bits", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_pd",
        "struct ibv_pd",
        &[("context", ""), ("handle", "")],
    ),
    (
        "zverbs_ffi::types::ibv_mr",
        "struct ibv_mr",
        &[
            ("context", ""),
            ("pd", ""),
            ("addr", ""),
            ("length", ""),
            ("handle", ""),
            ("lkey", ""),
            ("rkey", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_global_route",
        "struct ibv_global_route",
        &[
            ("dgid", ""),
            ("flow_label", ""),
            ("sgid_index", ""),
            ("hop_limit", ""),
            ("traffic_class", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_ah_attr",
        "struct ibv_ah_attr",
        &[
            ("grh", ""),
            ("dlid", ""),
            ("sl", ""),
            ("src_path_bits", ""),
            ("static_rate", ""),
            ("is_global", ""),
            ("port_num", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_qp_cap",
        "struct ibv_qp_cap",
        &[
            ("max_send_wr", ""),
            ("max_recv_wr", ""),
            ("max_send_sge", ""),
            ("max_recv_sge", ""),
            ("max_inline_data", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_qp_init_attr",
        "struct ibv_qp_init_attr",
        &[
            ("qp_context", ""),
            ("send_cq", ""),
            ("recv_cq", ""),
            ("srq", ""),
            ("cap", ""),
            ("qp_type", ""),
            ("sq_sig_all", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_rx_hash_conf",
        "struct ibv_rx_hash_conf",
        &[
            ("rx_hash_function", ""),
            ("rx_hash_key_len", ""),
            ("rx_hash_key", ""),
            ("rx_hash_fields_mask", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_qp_init_attr_ex",
        "struct ibv_qp_init_attr_ex",
        &[
            ("qp_context", ""),
            ("send_cq", ""),
            ("recv_cq", ""),
            ("srq", ""),
            ("cap", ""),
            ("qp_type", ""),
            ("sq_sig_all", ""),
            ("comp_mask", ""),
            ("pd", ""),
            ("xrcd", ""),
            ("create_flags", ""),
            ("max_tso_header", ""),
            ("rwq_ind_tbl", ""),
            ("rx_hash_conf", ""),
            ("source_qpn", ""),
            ("send_ops_flags", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_qp_ex",
        "struct ibv_qp_ex",
        &[
            ("qp_base", ""),
            ("comp_mask", ""),
            ("wr_id", ""),
            ("wr_flags", ""),
            ("wr_atomic_cmp_swp", ""),
            ("wr_atomic_fetch_add", ""),
            ("wr_bind_mw", ""),
            ("wr_local_inv", ""),
            ("wr_rdma_read", ""),
            ("wr_rdma_write", ""),
            ("wr_rdma_write_imm", ""),
            ("wr_send", ""),
            ("wr_send_imm", ""),
            ("wr_send_inv", ""),
            ("wr_send_tso", ""),
            ("wr_set_ud_addr", ""),
            ("wr_set_xrc_srqn", ""),
            ("wr_set_inline_data", ""),
            ("wr_set_inline_data_list", ""),
            ("wr_set_sge", ""),
            ("wr_set_sge_list", ""),
            ("wr_start", ""),
            ("wr_complete", ""),
            ("wr_abort", ""),
            ("wr_atomic_write", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_data_buf",
        "struct ibv_data_buf",
        &[("addr", ""), ("length", "")],
    ),
    (
        "zverbs_ffi::types::mlx5dv_cq_init_attr",
        "struct mlx5dv_cq_init_attr",
        &[
            ("comp_mask", ""),
            ("cqe_comp_res_format", ""),
            ("flags", ""),
            ("cqe_size", ""),
        ],
    ),
    (
        "zverbs_ffi::types::mlx5dv_cqe_comp_caps",
        "struct mlx5dv_cqe_comp_caps",
        &[("max_num", ""), ("supported_format", "")],
    ),
    (
        "zverbs_ffi::types::mlx5dv_qp_ex",
        "struct mlx5dv_qp_ex",
        &[
            ("comp_mask", ""),
            ("wr_set_dc_addr", ""),
            ("wr_mr_interleaved", ""),
            ("wr_mr_list", ""),
            ("wr_mkey_configure", ""),
            ("wr_set_mkey_access_flags", ""),
            ("wr_set_mkey_layout_list", ""),
            ("wr_set_mkey_layout_interleaved", ""),
            ("wr_set_mkey_sig_block", ""),
            ("wr_raw_wqe", ""),
            ("wr_set_dc_addr_stream", ""),
            ("wr_memcpy", ""),
            ("wr_set_mkey_crypto", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_qp_attr",
        "struct ibv_qp_attr",
        &[
            ("qp_state", ""),
            ("cur_qp_state", ""),
            ("path_mtu", ""),
            ("path_mig_state", ""),
            ("qkey", ""),
            ("rq_psn", ""),
            ("sq_psn", ""),
            ("dest_qp_num", ""),
            ("qp_access_flags", ""),
            ("cap", ""),
            ("ah_attr", ""),
            ("alt_ah_attr", ""),
            ("pkey_index", ""),
            ("alt_pkey_index", ""),
            ("en_sqd_async_notify", ""),
            ("sq_draining", ""),
            ("max_rd_atomic", ""),
            ("max_dest_rd_atomic", ""),
            ("min_rnr_timer", ""),
            ("port_num", ""),
            ("timeout", ""),
            ("retry_cnt", ""),
            ("rnr_retry", ""),
            ("alt_port_num", ""),
            ("alt_timeout", ""),
            ("rate_limit", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_send_wr",
        "struct ibv_send_wr",
        &[
            ("wr_id", ""),
            ("next", ""),
            ("sg_list", ""),
            ("num_sge", ""),
            ("opcode", ""),
            ("send_flags", ""),
            ("imm_data", ""),
            ("imm_data", "invalidate_rkey"),
            ("wr", ""),
            ("wr.rdma.remote_addr", ""),
            ("wr.rdma.rkey", ""),
            ("wr.atomic.remote_addr", ""),
            ("wr.atomic.compare_add", ""),
            ("wr.atomic.swap", ""),
            ("wr.atomic.rkey", ""),
            ("wr.ud.ah", ""),
            ("wr.ud.remote_qpn", ""),
            ("wr.ud.remote_qkey", ""),
            ("qp_type", ""),
            ("qp_type.remote_srqn", "qp_type.xrc.remote_srqn"),
            ("ext", "bind_mw"),
            ("ext.bind_mw.mw", "bind_mw.mw"),
            ("ext.bind_mw.rkey", "bind_mw.rkey"),
            ("ext.bind_mw.bind_info", "bind_mw.bind_info"),
            ("ext.tso.hdr", "tso.hdr"),
            ("ext.tso.hdr_sz", "tso.hdr_sz"),
            ("ext.tso.mss", "tso.mss"),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_send_wr_wr",
        "__typeof__(((struct ibv_send_wr *)0)->wr)",
        &[],
    ),
    (
        "zverbs_ffi::types::ibv_mw_bind_info",
        "struct ibv_mw_bind_info",
        &[
            ("mr", ""),
            ("addr", ""),
            ("length", ""),
            ("mw_access_flags", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_recv_wr",
        "struct ibv_recv_wr",
        &[
            ("wr_id", ""),
            ("next", ""),
            ("sg_list", ""),
            ("num_sge", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_sge",
        "struct ibv_sge",
        &[("addr", ""), ("length", ""), ("lkey", "")],
    ),
    (
        "zverbs_ffi::types::ibv_comp_channel",
        "struct ibv_comp_channel",
        &[("context", ""), ("fd", ""), ("refcnt", "")],
    ),
    (
        "zverbs_ffi::types::ibv_cq",
        "struct ibv_cq",
        &[
            ("context", ""),
            ("channel", ""),
            ("cq_context", ""),
            ("handle", ""),
            ("cqe", ""),
            ("mutex", ""),
            ("cond", ""),
            ("comp_events_completed", ""),
            ("async_events_completed", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_qp",
        "struct ibv_qp",
        &[
            ("context", ""),
            ("qp_context", ""),
            ("pd", ""),
            ("send_cq", ""),
            ("recv_cq", ""),
            ("srq", ""),
            ("handle", ""),
            ("qp_num", ""),
            ("state", ""),
            ("qp_type", ""),
            ("mutex", ""),
            ("cond", ""),
            ("events_completed", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_context_ops",
        "struct ibv_context_ops",
        &[
            ("_compat_query_device", ""),
            ("_compat_query_port", ""),
            ("_compat_alloc_pd", ""),
            ("_compat_dealloc_pd", ""),
            ("_compat_reg_mr", ""),
            ("_compat_rereg_mr", ""),
            ("_compat_dereg_mr", ""),
            ("alloc_mw", ""),
            ("bind_mw", ""),
            ("dealloc_mw", ""),
            ("_compat_create_cq", ""),
            ("poll_cq", ""),
            ("req_notify_cq", ""),
            ("_compat_cq_event", ""),
            ("_compat_resize_cq", ""),
            ("_compat_destroy_cq", ""),
            ("_compat_create_srq", ""),
            ("_compat_modify_srq", ""),
            ("_compat_query_srq", ""),
            ("_compat_destroy_srq", ""),
            ("post_srq_recv", ""),
            ("_compat_create_qp", ""),
            ("_compat_query_qp", ""),
            ("_compat_modify_qp", ""),
            ("_compat_destroy_qp", ""),
            ("post_send", ""),
            ("post_recv", ""),
            ("_compat_create_ah", ""),
            ("_compat_destroy_ah", ""),
            ("_compat_attach_mcast", ""),
            ("_compat_detach_mcast", ""),
            ("_compat_async_event", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_context",
        "struct ibv_context",
        &[
            ("device", ""),
            ("ops", ""),
            ("cmd_fd", ""),
            ("async_fd", ""),
            ("num_comp_vectors", ""),
            ("mutex", ""),
            ("abi_compat", ""),
        ],
    ),
    (
        "zverbs_ffi::types::verbs_context",
        "struct verbs_context",
        &[
            ("query_port", ""),
            ("modify_qp_rate_limit", ""),
            ("destroy_rwq_ind_table", ""),
            ("create_rwq_ind_table", ""),
            ("destroy_wq", ""),
            ("modify_wq", ""),
            ("create_wq", ""),
            ("ibv_destroy_flow", ""),
            ("ibv_create_flow", ""),
            ("create_qp_ex", ""),
            ("alloc_parent_domain", ""),
            ("dealloc_td", ""),
            ("alloc_td", ""),
            ("modify_cq", ""),
            ("create_cq_ex", ""),
            ("r#priv", "priv"),
            ("query_device_ex", ""),
            ("close_xrcd", ""),
            ("_ABI_placeholder3", ""),
            ("sz", ""),
            ("context", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_td_init_attr",
        "struct ibv_td_init_attr",
        &[("comp_mask", "")],
    ),
    (
        "zverbs_ffi::types::ibv_td",
        "struct ibv_td",
        &[("context", "")],
    ),
    (
        "zverbs_ffi::types::ibv_parent_domain_init_attr",
        "struct ibv_parent_domain_init_attr",
        &[
            ("pd", ""),
            ("td", ""),
            ("comp_mask", ""),
            ("alloc", ""),
            ("free", ""),
            ("pd_context", ""),
        ],
    ),
    (
        "zverbs_ffi::types::mlx5dv_obj",
        "struct mlx5dv_obj",
        &[
            ("qp", ""),
            ("qp.r#in", "qp.in"),
            ("qp.out", ""),
            ("cq", ""),
            ("cq.r#in", "cq.in"),
            ("cq.out", ""),
            ("srq", ""),
            ("rwq", ""),
            ("dm", ""),
            ("ah", ""),
            ("pd", ""),
            ("pd.out", ""),
        ],
    ),
    (
        "zverbs_ffi::types::mlx5dv_dci_streams",
        "struct mlx5dv_dci_streams",
        &[("log_num_concurent", ""), ("log_num_errored", "")],
    ),
    (
        "zverbs_ffi::types::mlx5dv_dc_init_attr",
        "struct mlx5dv_dc_init_attr",
        &[
            ("dc_type", ""),
            ("u.dct_access_key", "dct_access_key"),
            ("u.dci_streams", "dci_streams"),
        ],
    ),
    (
        "zverbs_ffi::types::mlx5dv_qp_init_attr",
        "struct mlx5dv_qp_init_attr",
        &[
            ("comp_mask", ""),
            ("create_flags", ""),
            ("dc_init_attr", ""),
            ("send_ops_flags", ""),
        ],
    ),
    // Types of other crates that zverbs hands to rdma-core: the scatter entry libibverbs reads
    // (a run of `Sge` is a `sg_list`), and the out-structs `mlx5dv_init_obj` fills.
    (
        "zverbs_core::Sge",
        "struct ibv_sge",
        &[("addr", ""), ("length", ""), ("lkey", "")],
    ),
    (
        "zverbs_mlx5dv::prm::dv::mlx5dv_qp",
        "struct mlx5dv_qp",
        &[
            ("dbrec", ""),
            ("sq", ""),
            ("sq.buf", ""),
            ("sq.wqe_cnt", ""),
            ("sq.stride", ""),
            ("rq", ""),
            ("rq.buf", ""),
            ("rq.wqe_cnt", ""),
            ("rq.stride", ""),
            ("bf", ""),
            ("bf.reg", ""),
            ("bf.size", ""),
            ("comp_mask", ""),
            ("uar_mmap_offset", ""),
            ("tirn", ""),
            ("tisn", ""),
            ("rqn", ""),
            ("sqn", ""),
            ("tir_icm_addr", ""),
        ],
    ),
    (
        "zverbs_mlx5dv::prm::dv::mlx5dv_cq",
        "struct mlx5dv_cq",
        &[
            ("buf", ""),
            ("dbrec", ""),
            ("cqe_cnt", ""),
            ("cqe_size", ""),
            ("cq_uar", ""),
            ("cqn", ""),
            ("comp_mask", ""),
        ],
    ),
    (
        "zverbs_mlx5dv::prm::dv::mlx5dv_srq",
        "struct mlx5dv_srq",
        &[
            ("buf", ""),
            ("dbrec", ""),
            ("stride", ""),
            ("head", ""),
            ("tail", ""),
            ("comp_mask", ""),
            ("srqn", ""),
        ],
    ),
    (
        "zverbs_mlx5dv::prm::dv::mlx5dv_ah",
        "struct mlx5dv_ah",
        &[("av", ""), ("comp_mask", "")],
    ),
    (
        "zverbs_ffi::cm::rdma_event_channel",
        "struct rdma_event_channel",
        &[("fd", "")],
    ),
    (
        "zverbs_ffi::cm::rdma_ib_addr",
        "struct rdma_ib_addr",
        &[("sgid", ""), ("dgid", ""), ("pkey", "")],
    ),
    (
        "zverbs_ffi::cm::rdma_addr",
        "struct rdma_addr",
        &[
            ("src_storage", ""),
            ("dst_storage", ""),
            ("ibaddr", "addr.ibaddr"),
        ],
    ),
    (
        "zverbs_ffi::cm::rdma_route",
        "struct rdma_route",
        &[("addr", ""), ("path_rec", ""), ("num_paths", "")],
    ),
    (
        "zverbs_ffi::cm::rdma_cm_id",
        "struct rdma_cm_id",
        &[
            ("verbs", ""),
            ("channel", ""),
            ("context", ""),
            ("qp", ""),
            ("route", ""),
            ("ps", ""),
            ("port_num", ""),
            ("event", ""),
            ("send_cq_channel", ""),
            ("send_cq", ""),
            ("recv_cq_channel", ""),
            ("recv_cq", ""),
            ("srq", ""),
            ("pd", ""),
            ("qp_type", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_ah",
        "struct ibv_ah",
        &[("context", ""), ("pd", ""), ("handle", "")],
    ),
    (
        "zverbs_ffi::types::ibv_srq_attr",
        "struct ibv_srq_attr",
        &[("max_wr", ""), ("max_sge", ""), ("srq_limit", "")],
    ),
    (
        "zverbs_ffi::types::ibv_srq_init_attr",
        "struct ibv_srq_init_attr",
        &[("srq_context", ""), ("attr", "")],
    ),
    (
        "zverbs_ffi::types::ibv_srq",
        "struct ibv_srq",
        &[
            ("context", ""),
            ("srq_context", ""),
            ("pd", ""),
            ("handle", ""),
            ("mutex", ""),
            ("cond", ""),
            ("events_completed", ""),
        ],
    ),
    (
        "zverbs_ffi::cm::rdma_conn_param",
        "struct rdma_conn_param",
        &[
            ("private_data", ""),
            ("private_data_len", ""),
            ("responder_resources", ""),
            ("initiator_depth", ""),
            ("flow_control", ""),
            ("retry_count", ""),
            ("rnr_retry_count", ""),
            ("srq", ""),
            ("qp_num", ""),
        ],
    ),
    (
        "zverbs_ffi::cm::rdma_ud_param",
        "struct rdma_ud_param",
        &[
            ("private_data", ""),
            ("private_data_len", ""),
            ("ah_attr", ""),
            ("qp_num", ""),
            ("qkey", ""),
        ],
    ),
    (
        "zverbs_ffi::cm::rdma_cm_event",
        "struct rdma_cm_event",
        &[
            ("id", ""),
            ("listen_id", ""),
            ("event", ""),
            ("status", ""),
            ("param", ""),
            ("param.conn", ""),
            ("param.ud", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_async_event",
        "struct ibv_async_event",
        &[("element", ""), ("event_type", "")],
    ),
    (
        "zverbs_ffi::types::ibv_query_device_ex_input",
        "struct ibv_query_device_ex_input",
        &[("comp_mask", "")],
    ),
    (
        "zverbs_ffi::types::ibv_odp_caps",
        "struct ibv_odp_caps",
        &[
            ("general_caps", ""),
            ("rc_odp_caps", "per_transport_caps.rc_odp_caps"),
            ("uc_odp_caps", "per_transport_caps.uc_odp_caps"),
            ("ud_odp_caps", "per_transport_caps.ud_odp_caps"),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_device_attr_ex",
        "struct ibv_device_attr_ex",
        &[
            ("orig_attr", ""),
            ("comp_mask", ""),
            ("odp_caps", ""),
            ("completion_timestamp_mask", ""),
            ("hca_core_clock", ""),
            ("device_cap_flags_ex", ""),
            ("tso_caps", ""),
            ("rss_caps", ""),
            ("max_wq_type_rq", ""),
            ("packet_pacing_caps", ""),
            ("raw_packet_caps", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_rss_caps",
        "struct ibv_rss_caps",
        &[
            ("supported_qpts", ""),
            ("max_rwq_indirection_tables", ""),
            ("max_rwq_indirection_table_size", ""),
            ("rx_hash_fields_mask", ""),
            ("rx_hash_function", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_wq",
        "struct ibv_wq",
        &[
            ("context", ""),
            ("wq_context", ""),
            ("pd", ""),
            ("cq", ""),
            ("wq_num", ""),
            ("handle", ""),
            ("state", ""),
            ("wq_type", ""),
            ("post_recv", ""),
            ("mutex", ""),
            ("cond", ""),
            ("events_completed", ""),
            ("comp_mask", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_wq_init_attr",
        "struct ibv_wq_init_attr",
        &[
            ("wq_context", ""),
            ("wq_type", ""),
            ("max_wr", ""),
            ("max_sge", ""),
            ("pd", ""),
            ("cq", ""),
            ("comp_mask", ""),
            ("create_flags", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_wq_attr",
        "struct ibv_wq_attr",
        &[
            ("attr_mask", ""),
            ("wq_state", ""),
            ("curr_wq_state", ""),
            ("flags", ""),
            ("flags_mask", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_rwq_ind_table",
        "struct ibv_rwq_ind_table",
        &[
            ("context", ""),
            ("ind_tbl_handle", ""),
            ("ind_tbl_num", ""),
            ("comp_mask", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_rwq_ind_table_init_attr",
        "struct ibv_rwq_ind_table_init_attr",
        &[("log_ind_tbl_size", ""), ("ind_tbl", ""), ("comp_mask", "")],
    ),
    (
        "zverbs_ffi::eth::mlx5dv_striding_rq_init_attr",
        "struct mlx5dv_striding_rq_init_attr",
        &[
            ("single_stride_log_num_of_bytes", ""),
            ("single_wqe_log_num_of_strides", ""),
            ("two_byte_shift_en", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::mlx5dv_wq_init_attr",
        "struct mlx5dv_wq_init_attr",
        &[("comp_mask", ""), ("striding_rq_attrs", "")],
    ),
    (
        "zverbs_ffi::eth::mlx5dv_rwq",
        "struct mlx5dv_rwq",
        &[
            ("buf", ""),
            ("dbrec", ""),
            ("wqe_cnt", ""),
            ("stride", ""),
            ("comp_mask", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_flow_attr",
        "struct ibv_flow_attr",
        &[
            ("comp_mask", ""),
            ("r#type", "type"),
            ("size", ""),
            ("priority", ""),
            ("num_of_specs", ""),
            ("port", ""),
            ("flags", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_flow_eth_filter",
        "struct ibv_flow_eth_filter",
        &[
            ("dst_mac", ""),
            ("src_mac", ""),
            ("ether_type", ""),
            ("vlan_tag", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_flow_spec_eth",
        "struct ibv_flow_spec_eth",
        &[("r#type", "type"), ("size", ""), ("val", ""), ("mask", "")],
    ),
    (
        "zverbs_ffi::eth::ibv_flow_ipv4_ext_filter",
        "struct ibv_flow_ipv4_ext_filter",
        &[
            ("src_ip", ""),
            ("dst_ip", ""),
            ("proto", ""),
            ("tos", ""),
            ("ttl", ""),
            ("flags", ""),
        ],
    ),
    (
        "zverbs_ffi::eth::ibv_flow_spec_ipv4_ext",
        "struct ibv_flow_spec_ipv4_ext",
        &[("r#type", "type"), ("size", ""), ("val", ""), ("mask", "")],
    ),
    (
        "zverbs_ffi::eth::ibv_flow_tcp_udp_filter",
        "struct ibv_flow_tcp_udp_filter",
        &[("dst_port", ""), ("src_port", "")],
    ),
    (
        "zverbs_ffi::eth::ibv_flow_spec_tcp_udp",
        "struct ibv_flow_spec_tcp_udp",
        &[("r#type", "type"), ("size", ""), ("val", ""), ("mask", "")],
    ),
    (
        "zverbs_ffi::eth::ibv_flow_spec_action_tag",
        "struct ibv_flow_spec_action_tag",
        &[("r#type", "type"), ("size", ""), ("tag_id", "")],
    ),
    (
        "zverbs_ffi::eth::ibv_flow",
        "struct ibv_flow",
        &[("comp_mask", ""), ("context", ""), ("handle", "")],
    ),
    (
        "zverbs_ffi::types::ibv_values_ex",
        "struct ibv_values_ex",
        &[("comp_mask", ""), ("raw_clock", "")],
    ),
    (
        "zverbs_ffi::types::ibv_cq_init_attr_ex",
        "struct ibv_cq_init_attr_ex",
        &[
            ("cqe", ""),
            ("cq_context", ""),
            ("channel", ""),
            ("comp_vector", ""),
            ("wc_flags", ""),
            ("comp_mask", ""),
            ("flags", ""),
            ("parent_domain", ""),
        ],
    ),
    (
        "zverbs_ffi::types::ibv_poll_cq_attr",
        "struct ibv_poll_cq_attr",
        &[("comp_mask", "")],
    ),
    (
        "zverbs_ffi::types::ibv_cq_ex",
        "struct ibv_cq_ex",
        &[
            ("context", ""),
            ("channel", ""),
            ("cq_context", ""),
            ("handle", ""),
            ("cqe", ""),
            ("mutex", ""),
            ("cond", ""),
            ("comp_events_completed", ""),
            ("async_events_completed", ""),
            ("comp_mask", ""),
            ("status", ""),
            ("wr_id", ""),
            ("start_poll", ""),
            ("next_poll", ""),
            ("end_poll", ""),
            ("read_opcode", ""),
            ("read_vendor_err", ""),
            ("read_byte_len", ""),
            ("read_imm_data", ""),
            ("read_qp_num", ""),
            ("read_src_qp", ""),
            ("read_wc_flags", ""),
            ("read_slid", ""),
            ("read_sl", ""),
            ("read_dlid_path_bits", ""),
            ("read_completion_ts", ""),
            ("read_cvlan", ""),
            ("read_flow_tag", ""),
            ("read_tm_info", ""),
            ("read_completion_wallclock_ns", ""),
        ],
    ),
    (
        "zverbs_mlx5dv::prm::clock::mlx5dv_clock_info",
        "struct mlx5dv_clock_info",
        &[
            ("nsec", ""),
            ("last_cycles", ""),
            ("frac", ""),
            ("mult", ""),
            ("shift", ""),
            ("mask", ""),
        ],
    ),
    (
        "zverbs_mlx5dv::prm::clock::ib_uverbs_clock_info",
        "struct mlx5_ib_clock_info",
        &[
            ("sign", ""),
            ("resv", ""),
            ("nsec", ""),
            ("cycles", ""),
            ("frac", ""),
            ("mult", ""),
            ("shift", ""),
            ("mask", ""),
            ("overflow_period", ""),
        ],
    ),
];

/// Constants: `(Rust path, C expression)`.
const CONSTS: &[(&str, &str)] = &[
    (
        "zverbs_ffi::types::IBV_VALUES_MASK_RAW_CLOCK",
        "IBV_VALUES_MASK_RAW_CLOCK",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_EX_WITH_BYTE_LEN",
        "IBV_WC_EX_WITH_BYTE_LEN",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_EX_WITH_IMM",
        "IBV_WC_EX_WITH_IMM",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_EX_WITH_QP_NUM",
        "IBV_WC_EX_WITH_QP_NUM",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_EX_WITH_SRC_QP",
        "IBV_WC_EX_WITH_SRC_QP",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_EX_WITH_SLID",
        "IBV_WC_EX_WITH_SLID",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_EX_WITH_SL",
        "IBV_WC_EX_WITH_SL",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_EX_WITH_DLID_PATH_BITS",
        "IBV_WC_EX_WITH_DLID_PATH_BITS",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP",
        "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK",
        "IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK",
    ),
    (
        "zverbs_ffi::types::wc_ex_flags::IBV_WC_STANDARD_FLAGS",
        "IBV_WC_STANDARD_FLAGS",
    ),
    (
        "zverbs_mlx5dv::prm::clock::MLX5_IB_CLOCK_INFO_KERNEL_UPDATING",
        "MLX5_IB_CLOCK_INFO_KERNEL_UPDATING",
    ),
    (
        "zverbs_mlx5dv::prm::clock::MLX5_IB_MMAP_CLOCK_INFO",
        "MLX5_IB_MMAP_CLOCK_INFO",
    ),
    (
        "zverbs_mlx5dv::prm::clock::MLX5_IB_MMAP_CORE_CLOCK",
        "MLX5_IB_MMAP_CORE_CLOCK",
    ),
    (
        "zverbs_mlx5dv::prm::clock::MLX5_IB_CLOCK_INFO_V1",
        "MLX5_IB_CLOCK_INFO_V1",
    ),
    ("zverbs_ffi::types::IBV_WR_RDMA_WRITE", "IBV_WR_RDMA_WRITE"),
    (
        "zverbs_ffi::types::IBV_WR_RDMA_WRITE_WITH_IMM",
        "IBV_WR_RDMA_WRITE_WITH_IMM",
    ),
    ("zverbs_ffi::types::IBV_WR_SEND", "IBV_WR_SEND"),
    (
        "zverbs_ffi::types::IBV_WR_SEND_WITH_IMM",
        "IBV_WR_SEND_WITH_IMM",
    ),
    ("zverbs_ffi::types::IBV_WR_RDMA_READ", "IBV_WR_RDMA_READ"),
    (
        "zverbs_ffi::types::IBV_WR_ATOMIC_CMP_AND_SWP",
        "IBV_WR_ATOMIC_CMP_AND_SWP",
    ),
    (
        "zverbs_ffi::types::IBV_WR_ATOMIC_FETCH_AND_ADD",
        "IBV_WR_ATOMIC_FETCH_AND_ADD",
    ),
    ("zverbs_ffi::types::IBV_SEND_FENCE", "IBV_SEND_FENCE"),
    ("zverbs_ffi::types::IBV_SEND_SIGNALED", "IBV_SEND_SIGNALED"),
    (
        "zverbs_ffi::types::IBV_SEND_SOLICITED",
        "IBV_SEND_SOLICITED",
    ),
    ("zverbs_ffi::types::IBV_SEND_INLINE", "IBV_SEND_INLINE"),
    ("zverbs_ffi::types::IBV_SEND_IP_CSUM", "IBV_SEND_IP_CSUM"),
    (
        "zverbs_ffi::types::IBV_QPT_RAW_PACKET",
        "IBV_QPT_RAW_PACKET",
    ),
    ("zverbs_ffi::types::MLX5DV_OBJ_RWQ", "MLX5DV_OBJ_RWQ"),
    (
        "zverbs_ffi::eth::IBV_DEVICE_RAW_IP_CSUM",
        "IBV_DEVICE_RAW_IP_CSUM",
    ),
    (
        "zverbs_ffi::eth::IBV_DEVICE_MANAGED_FLOW_STEERING",
        "IBV_DEVICE_MANAGED_FLOW_STEERING",
    ),
    (
        "zverbs_ffi::eth::IBV_RAW_PACKET_CAP_IP_CSUM",
        "IBV_RAW_PACKET_CAP_IP_CSUM",
    ),
    (
        "zverbs_ffi::eth::IBV_QP_INIT_ATTR_IND_TABLE",
        "IBV_QP_INIT_ATTR_IND_TABLE",
    ),
    (
        "zverbs_ffi::eth::IBV_QP_INIT_ATTR_RX_HASH",
        "IBV_QP_INIT_ATTR_RX_HASH",
    ),
    (
        "zverbs_ffi::eth::IBV_RX_HASH_FUNC_TOEPLITZ",
        "IBV_RX_HASH_FUNC_TOEPLITZ",
    ),
    ("zverbs_ffi::eth::IBV_WQT_RQ", "IBV_WQT_RQ"),
    ("zverbs_ffi::eth::IBV_WQS_RESET", "IBV_WQS_RESET"),
    ("zverbs_ffi::eth::IBV_WQS_RDY", "IBV_WQS_RDY"),
    ("zverbs_ffi::eth::IBV_WQ_ATTR_STATE", "IBV_WQ_ATTR_STATE"),
    (
        "zverbs_ffi::eth::MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ",
        "MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ",
    ),
    (
        "zverbs_ffi::eth::IBV_FLOW_ATTR_NORMAL",
        "IBV_FLOW_ATTR_NORMAL",
    ),
    ("zverbs_ffi::eth::IBV_FLOW_SPEC_ETH", "IBV_FLOW_SPEC_ETH"),
    (
        "zverbs_ffi::eth::IBV_FLOW_SPEC_IPV4_EXT",
        "IBV_FLOW_SPEC_IPV4_EXT",
    ),
    ("zverbs_ffi::eth::IBV_FLOW_SPEC_TCP", "IBV_FLOW_SPEC_TCP"),
    ("zverbs_ffi::eth::IBV_FLOW_SPEC_UDP", "IBV_FLOW_SPEC_UDP"),
    (
        "zverbs_ffi::eth::IBV_FLOW_SPEC_ACTION_TAG",
        "IBV_FLOW_SPEC_ACTION_TAG",
    ),
    (
        "zverbs_ffi::types::IBV_ACCESS_LOCAL_WRITE",
        "IBV_ACCESS_LOCAL_WRITE",
    ),
    (
        "zverbs_ffi::types::IBV_ACCESS_REMOTE_WRITE",
        "IBV_ACCESS_REMOTE_WRITE",
    ),
    (
        "zverbs_ffi::types::IBV_ACCESS_REMOTE_READ",
        "IBV_ACCESS_REMOTE_READ",
    ),
    (
        "zverbs_ffi::types::IBV_ACCESS_REMOTE_ATOMIC",
        "IBV_ACCESS_REMOTE_ATOMIC",
    ),
    ("zverbs_ffi::types::IBV_QPS_RESET", "IBV_QPS_RESET"),
    ("zverbs_ffi::types::IBV_QPS_INIT", "IBV_QPS_INIT"),
    ("zverbs_ffi::types::IBV_QPS_RTR", "IBV_QPS_RTR"),
    ("zverbs_ffi::types::IBV_QPS_RTS", "IBV_QPS_RTS"),
    ("zverbs_ffi::types::IBV_QPS_SQD", "IBV_QPS_SQD"),
    ("zverbs_ffi::types::IBV_QPS_SQE", "IBV_QPS_SQE"),
    ("zverbs_ffi::types::IBV_QPS_ERR", "IBV_QPS_ERR"),
    ("zverbs_ffi::types::IBV_MTU_256", "IBV_MTU_256"),
    ("zverbs_ffi::types::IBV_MTU_512", "IBV_MTU_512"),
    ("zverbs_ffi::types::IBV_MTU_1024", "IBV_MTU_1024"),
    ("zverbs_ffi::types::IBV_MTU_2048", "IBV_MTU_2048"),
    ("zverbs_ffi::types::IBV_MTU_4096", "IBV_MTU_4096"),
    ("zverbs_ffi::types::IBV_QPT_RC", "IBV_QPT_RC"),
    ("zverbs_ffi::types::IBV_QPT_UD", "IBV_QPT_UD"),
    ("zverbs_ffi::types::IBV_QPT_DRIVER", "IBV_QPT_DRIVER"),
    ("zverbs_ffi::types::MLX5DV_DCTYPE_DCT", "MLX5DV_DCTYPE_DCT"),
    ("zverbs_ffi::types::MLX5DV_DCTYPE_DCI", "MLX5DV_DCTYPE_DCI"),
    (
        "zverbs_ffi::types::MLX5DV_QP_INIT_ATTR_MASK_DC",
        "MLX5DV_QP_INIT_ATTR_MASK_DC",
    ),
    (
        "zverbs_ffi::types::MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE",
        "MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE",
    ),
    (
        "zverbs_ffi::types::MLX5DV_CONTEXT_MASK_CQE_COMPRESION",
        "MLX5DV_CONTEXT_MASK_CQE_COMPRESION",
    ),
    (
        "zverbs_ffi::types::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS",
        "IBV_QP_INIT_ATTR_SEND_OPS_FLAGS",
    ),
    ("zverbs_ffi::types::IBV_SRQ_MAX_WR", "IBV_SRQ_MAX_WR"),
    ("zverbs_ffi::types::IBV_SRQ_LIMIT", "IBV_SRQ_LIMIT"),
    (
        "zverbs_ffi::types::IBV_QP_INIT_ATTR_PD",
        "IBV_QP_INIT_ATTR_PD",
    ),
    (
        "zverbs_ffi::types::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS",
        "MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS",
    ),
    (
        "zverbs_ffi::types::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE",
        "MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE",
    ),
    ("zverbs_ffi::types::MLX5DV_OBJ_QP", "MLX5DV_OBJ_QP"),
    ("zverbs_ffi::types::MLX5DV_OBJ_CQ", "MLX5DV_OBJ_CQ"),
    ("zverbs_ffi::types::MLX5DV_OBJ_SRQ", "MLX5DV_OBJ_SRQ"),
    ("zverbs_ffi::types::MLX5DV_OBJ_AH", "MLX5DV_OBJ_AH"),
    (
        "zverbs_mlx5dv::prm::dv::MLX5DV_SRQ_MASK_SRQN",
        "MLX5DV_SRQ_MASK_SRQN",
    ),
    (
        "zverbs_ffi::types::IBV_LINK_LAYER_INFINIBAND",
        "IBV_LINK_LAYER_INFINIBAND",
    ),
    (
        "zverbs_ffi::types::IBV_LINK_LAYER_ETHERNET",
        "IBV_LINK_LAYER_ETHERNET",
    ),
    ("zverbs_ffi::types::IBV_GID_TYPE_IB", "IBV_GID_TYPE_IB"),
    (
        "zverbs_ffi::types::IBV_GID_TYPE_ROCE_V1",
        "IBV_GID_TYPE_ROCE_V1",
    ),
    (
        "zverbs_ffi::types::IBV_GID_TYPE_ROCE_V2",
        "IBV_GID_TYPE_ROCE_V2",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_STATE",
        "IBV_QP_STATE",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_ACCESS_FLAGS",
        "IBV_QP_ACCESS_FLAGS",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_PKEY_INDEX",
        "IBV_QP_PKEY_INDEX",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_PORT",
        "IBV_QP_PORT",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_QKEY",
        "IBV_QP_QKEY",
    ),
    ("zverbs_ffi::types::qp_attr_mask::IBV_QP_AV", "IBV_QP_AV"),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_PATH_MTU",
        "IBV_QP_PATH_MTU",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_TIMEOUT",
        "IBV_QP_TIMEOUT",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_RETRY_CNT",
        "IBV_QP_RETRY_CNT",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_RNR_RETRY",
        "IBV_QP_RNR_RETRY",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_RQ_PSN",
        "IBV_QP_RQ_PSN",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC",
        "IBV_QP_MAX_QP_RD_ATOMIC",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_MIN_RNR_TIMER",
        "IBV_QP_MIN_RNR_TIMER",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_SQ_PSN",
        "IBV_QP_SQ_PSN",
    ),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC",
        "IBV_QP_MAX_DEST_RD_ATOMIC",
    ),
    ("zverbs_ffi::types::qp_attr_mask::IBV_QP_CAP", "IBV_QP_CAP"),
    (
        "zverbs_ffi::types::qp_attr_mask::IBV_QP_DEST_QPN",
        "IBV_QP_DEST_QPN",
    ),
    ("zverbs_ffi::cm::RDMA_PS_TCP", "RDMA_PS_TCP"),
    ("zverbs_ffi::cm::RDMA_PS_UDP", "RDMA_PS_UDP"),
    (
        "zverbs_ffi::cm::event::MULTICAST_JOIN",
        "RDMA_CM_EVENT_MULTICAST_JOIN",
    ),
    (
        "zverbs_ffi::cm::event::MULTICAST_ERROR",
        "RDMA_CM_EVENT_MULTICAST_ERROR",
    ),
    (
        "zverbs_ffi::cm::event::ADDR_RESOLVED",
        "RDMA_CM_EVENT_ADDR_RESOLVED",
    ),
    (
        "zverbs_ffi::cm::event::ADDR_ERROR",
        "RDMA_CM_EVENT_ADDR_ERROR",
    ),
    (
        "zverbs_ffi::cm::event::ROUTE_RESOLVED",
        "RDMA_CM_EVENT_ROUTE_RESOLVED",
    ),
    (
        "zverbs_ffi::cm::event::ROUTE_ERROR",
        "RDMA_CM_EVENT_ROUTE_ERROR",
    ),
    (
        "zverbs_ffi::cm::event::CONNECT_REQUEST",
        "RDMA_CM_EVENT_CONNECT_REQUEST",
    ),
    (
        "zverbs_ffi::cm::event::CONNECT_RESPONSE",
        "RDMA_CM_EVENT_CONNECT_RESPONSE",
    ),
    (
        "zverbs_ffi::cm::event::CONNECT_ERROR",
        "RDMA_CM_EVENT_CONNECT_ERROR",
    ),
    (
        "zverbs_ffi::cm::event::UNREACHABLE",
        "RDMA_CM_EVENT_UNREACHABLE",
    ),
    ("zverbs_ffi::cm::event::REJECTED", "RDMA_CM_EVENT_REJECTED"),
    (
        "zverbs_ffi::cm::event::ESTABLISHED",
        "RDMA_CM_EVENT_ESTABLISHED",
    ),
    (
        "zverbs_ffi::cm::event::DISCONNECTED",
        "RDMA_CM_EVENT_DISCONNECTED",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_CQ_ERR",
        "IBV_EVENT_CQ_ERR",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_QP_FATAL",
        "IBV_EVENT_QP_FATAL",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_QP_REQ_ERR",
        "IBV_EVENT_QP_REQ_ERR",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_QP_ACCESS_ERR",
        "IBV_EVENT_QP_ACCESS_ERR",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_COMM_EST",
        "IBV_EVENT_COMM_EST",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_SQ_DRAINED",
        "IBV_EVENT_SQ_DRAINED",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_PATH_MIG",
        "IBV_EVENT_PATH_MIG",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_PATH_MIG_ERR",
        "IBV_EVENT_PATH_MIG_ERR",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_DEVICE_FATAL",
        "IBV_EVENT_DEVICE_FATAL",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_PORT_ACTIVE",
        "IBV_EVENT_PORT_ACTIVE",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_PORT_ERR",
        "IBV_EVENT_PORT_ERR",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_LID_CHANGE",
        "IBV_EVENT_LID_CHANGE",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_PKEY_CHANGE",
        "IBV_EVENT_PKEY_CHANGE",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_SM_CHANGE",
        "IBV_EVENT_SM_CHANGE",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_SRQ_ERR",
        "IBV_EVENT_SRQ_ERR",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_SRQ_LIMIT_REACHED",
        "IBV_EVENT_SRQ_LIMIT_REACHED",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_QP_LAST_WQE_REACHED",
        "IBV_EVENT_QP_LAST_WQE_REACHED",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_CLIENT_REREGISTER",
        "IBV_EVENT_CLIENT_REREGISTER",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_GID_CHANGE",
        "IBV_EVENT_GID_CHANGE",
    ),
    (
        "zverbs_ffi::types::ibv_event_type::IBV_EVENT_WQ_FATAL",
        "IBV_EVENT_WQ_FATAL",
    ),
];

/// C enum types whose size the Rust declarations assume to be 4 bytes (`c_uint`).
const ENUMS: &[&str] = &[
    "enum ibv_wr_opcode",
    "enum ibv_wc_status",
    "enum ibv_wc_opcode",
    "enum ibv_qp_type",
    "enum ibv_qp_state",
    "enum ibv_mtu",
    "enum ibv_port_state",
    "enum ibv_mig_state",
    "enum ibv_atomic_cap",
    "enum rdma_port_space",
    "enum rdma_cm_event_type",
    "enum mlx5dv_dc_type",
    "enum ibv_srq_attr_mask",
    "enum ibv_event_type",
    "enum ibv_wq_type",
    "enum ibv_wq_state",
    "enum ibv_flow_attr_type",
    "enum ibv_flow_spec_type",
];

const HEADERS: &[(&str, &str)] = &[
    ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
    ("/usr/include/infiniband/mlx5dv.h", "libibverbs-dev"),
    ("/usr/include/rdma/rdma_cma.h", "librdmacm-dev"),
];

/// PMIx (`<pmix_common.h>`, Debian's `libpmix-dev`): the structs and constants of
/// `zverbs_ffi::pmix`, the client library that jobs launched by `mpirun` or `srun --mpi=pmix`
/// use to find each other.
const PMIX_STRUCTS: &[Spec] = &[
    (
        "zverbs_ffi::pmix::pmix_proc_t",
        "pmix_proc_t",
        &[("nspace", ""), ("rank", "")],
    ),
    (
        "zverbs_ffi::pmix::pmix_byte_object_t",
        "pmix_byte_object_t",
        &[("bytes", ""), ("size", "")],
    ),
    (
        "zverbs_ffi::pmix::pmix_value_data",
        "__typeof__(((pmix_value_t *)0)->data)",
        &[],
    ),
    (
        "zverbs_ffi::pmix::pmix_value_t",
        "pmix_value_t",
        &[
            ("r#type", "type"),
            ("data", ""),
            ("data.flag", ""),
            ("data.integer", ""),
            ("data.uint32", ""),
            ("data.bo", ""),
            ("data.ptr", ""),
        ],
    ),
    (
        "zverbs_ffi::pmix::pmix_info_t",
        "pmix_info_t",
        &[("key", ""), ("flags", ""), ("value", "")],
    ),
];

/// PMIx constants; the typedefs' sizes are checked as `sizeof` entries.
const PMIX_CONSTS: &[(&str, &str)] = &[
    ("zverbs_ffi::pmix::PMIX_MAX_NSLEN", "PMIX_MAX_NSLEN"),
    ("zverbs_ffi::pmix::PMIX_MAX_KEYLEN", "PMIX_MAX_KEYLEN"),
    ("zverbs_ffi::pmix::PMIX_SUCCESS", "PMIX_SUCCESS"),
    ("zverbs_ffi::pmix::PMIX_ERR_TIMEOUT", "PMIX_ERR_TIMEOUT"),
    ("zverbs_ffi::pmix::PMIX_ERR_UNREACH", "PMIX_ERR_UNREACH"),
    ("zverbs_ffi::pmix::PMIX_ERR_INIT", "PMIX_ERR_INIT"),
    ("zverbs_ffi::pmix::PMIX_ERR_NOT_FOUND", "PMIX_ERR_NOT_FOUND"),
    ("zverbs_ffi::pmix::PMIX_RANK_WILDCARD", "PMIX_RANK_WILDCARD"),
    ("zverbs_ffi::pmix::PMIX_BOOL", "PMIX_BOOL"),
    ("zverbs_ffi::pmix::PMIX_INT", "PMIX_INT"),
    ("zverbs_ffi::pmix::PMIX_UINT32", "PMIX_UINT32"),
    ("zverbs_ffi::pmix::PMIX_BYTE_OBJECT", "PMIX_BYTE_OBJECT"),
    ("zverbs_ffi::pmix::PMIX_GLOBAL", "PMIX_GLOBAL"),
    ("zverbs_ffi::pmix::PMIX_INFO_REQD", "PMIX_INFO_REQD"),
    // The keys are strings: their lengths (NUL included) and, in `abi/tests`, their text.
    (
        "zverbs_ffi::pmix::PMIX_JOB_SIZE.to_bytes_with_nul().len()",
        "sizeof(PMIX_JOB_SIZE)",
    ),
    (
        "zverbs_ffi::pmix::PMIX_COLLECT_DATA.to_bytes_with_nul().len()",
        "sizeof(PMIX_COLLECT_DATA)",
    ),
    (
        "zverbs_ffi::pmix::PMIX_TIMEOUT.to_bytes_with_nul().len()",
        "sizeof(PMIX_TIMEOUT)",
    ),
    (
        "::core::mem::size_of::<zverbs_ffi::pmix::pmix_status_t>()",
        "sizeof(pmix_status_t)",
    ),
    (
        "::core::mem::size_of::<zverbs_ffi::pmix::pmix_rank_t>()",
        "sizeof(pmix_rank_t)",
    ),
    (
        "::core::mem::size_of::<zverbs_ffi::pmix::pmix_data_type_t>()",
        "sizeof(pmix_data_type_t)",
    ),
    (
        "::core::mem::size_of::<zverbs_ffi::pmix::pmix_scope_t>()",
        "sizeof(pmix_scope_t)",
    ),
    (
        "::core::mem::size_of::<zverbs_ffi::pmix::pmix_info_directives_t>()",
        "sizeof(pmix_info_directives_t)",
    ),
];

/// Where `<pmix.h>` is: Debian keeps PMIx's headers under `/usr/lib/<triplet>/pmix2/include`
/// (what `pkg-config --cflags pmix` names), other systems in `/usr/include`.
fn pmix_include() -> Option<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/include")];
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        for d in rd.flatten() {
            dirs.push(d.path().join("pmix2/include"));
        }
    }
    dirs.push(PathBuf::from("/usr/lib/pmix2/include"));
    dirs.into_iter().find(|d| d.join("pmix.h").exists())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let missing: Vec<&str> = HEADERS
        .iter()
        .filter(|(p, _)| !Path::new(p).exists())
        .map(|(p, pkg)| {
            println!("cargo:warning=missing {p} (package {pkg})");
            *pkg
        })
        .collect();
    if !missing.is_empty() {
        panic!(
            "zverbs-abi checks the FFI against rdma-core's headers, which are not installed: \
             apt-get install libibverbs-dev librdmacm-dev (missing: {})",
            missing.join(", ")
        );
    }
    for (p, _) in HEADERS {
        println!("cargo:rerun-if-changed={p}");
    }
    let Some(pmix) = pmix_include() else {
        panic!(
            "zverbs-abi checks the PMIx binding against <pmix.h>, which is not installed: \
             apt-get install libpmix-dev"
        );
    };
    println!(
        "cargo:rerun-if-changed={}",
        pmix.join("pmix_common.h").display()
    );

    let mut c = String::from(
        "#include <stddef.h>\n#include <infiniband/verbs.h>\n#include <infiniband/mlx5dv.h>\n\
         #include <rdma/rdma_cma.h>\n#include <rdma/mlx5-abi.h>\n#include <pmix.h>\n\
         struct zverbs_abi_entry { const char *name; unsigned long long value; };\n\
         const struct zverbs_abi_entry zverbs_abi_entries[] = {\n",
    );
    let mut rs = String::from(
        "/// `(name, value)` computed by Rust, in the C table's order.\npub static RUST: &[(&str, u64)] = &[\n",
    );
    for (rust, cty, fields) in STRUCTS.iter().chain(PMIX_STRUCTS) {
        let name = rust.rsplit("::").next().unwrap_or(rust);
        writeln!(c, "  {{\"{name} size\", sizeof({cty})}},").unwrap();
        writeln!(c, "  {{\"{name} align\", _Alignof({cty})}},").unwrap();
        writeln!(
            rs,
            "  (\"{name} size\", ::core::mem::size_of::<{rust}>() as u64),"
        )
        .unwrap();
        writeln!(
            rs,
            "  (\"{name} align\", ::core::mem::align_of::<{rust}>() as u64),"
        )
        .unwrap();
        for (rf, cf) in *fields {
            let cf = if cf.is_empty() { rf } else { cf };
            writeln!(c, "  {{\"{name}.{cf}\", offsetof({cty}, {cf})}},").unwrap();
            writeln!(
                rs,
                "  (\"{name}.{cf}\", ::core::mem::offset_of!({rust}, {rf}) as u64),"
            )
            .unwrap();
        }
    }
    for e in ENUMS {
        writeln!(c, "  {{\"sizeof({e})\", sizeof({e})}},").unwrap();
        writeln!(rs, "  (\"sizeof({e})\", 4),").unwrap();
    }
    for (rust, cexpr) in CONSTS.iter().chain(PMIX_CONSTS) {
        writeln!(c, "  {{\"{cexpr}\", (unsigned long long)({cexpr})}},").unwrap();
        writeln!(rs, "  (\"{cexpr}\", {rust} as u64),").unwrap();
    }
    c.push_str("};\nconst unsigned long long zverbs_abi_count = sizeof(zverbs_abi_entries) / sizeof(zverbs_abi_entries[0]);\n");
    rs.push_str("];\n");

    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out.join("probe.c"), c).expect("write probe.c");
    std::fs::write(out.join("rust_table.rs"), rs).expect("write rust_table.rs");
    cc::Build::new()
        .file(out.join("probe.c"))
        .include(&pmix)
        .warnings(true)
        .compile("zverbs_abi_probe");
}
