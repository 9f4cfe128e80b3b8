// SPDX-License-Identifier: MIT
/*
 * locusctl simulate's model and GPU presets. Every number is the model's
 * config.json (Hugging Face, the model's own repository) or the vendor's
 * datasheet; what is derived says how. All of them can be overridden on the
 * command line (control/sim_ctl.c).
 */
#include <stdio.h>
#include <string.h>

#include "locus_common.h"
#include "locus_sim.h"
#include "locus_sim_moe.h"

/*
 * Qwen3-30B-A3B, huggingface.co/Qwen/Qwen3-30B-A3B config.json:
 * hidden_size 2048, moe_intermediate_size 768, num_hidden_layers 48 (every
 * one a MoE layer: decoder_sparse_step 1, mlp_only_layers []), num_experts
 * 128, num_experts_per_tok 8, num_key_value_heads 4, head_dim 128,
 * vocab_size 151936, torch_dtype bfloat16 (2 bytes). Model card: 30.5B
 * parameters in total.
 */
#define QWEN3_HIDDEN        2048u
#define QWEN3_MOE_INTER     768u
#define QWEN3_LAYERS        48u
#define QWEN3_EXPERTS       128u
#define QWEN3_TOPK          8u
#define QWEN3_KV_HEADS      4u
#define QWEN3_HEAD_DIM      128u
#define QWEN3_VOCAB         151936.0
#define QWEN3_TOTAL_PARAMS  30.5e9

/*
 * DeepSeek-V2-Lite, huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json:
 * hidden_size 2048, moe_intermediate_size 1408, num_hidden_layers 27 with
 * first_k_dense_replace 1 (26 MoE layers), n_routed_experts 64,
 * num_experts_per_tok 6, kv_lora_rank 512, qk_rope_head_dim 64 (MLA caches
 * the 512-wide latent and the 64-wide rope key per layer), vocab_size
 * 102400, torch_dtype bfloat16. Model card: 15.7B parameters in total. The
 * ESFT traces (ESFT-vanilla-lite) have this shape: 26 x 64, top-6.
 */
#define DSV2L_HIDDEN        2048u
#define DSV2L_MOE_INTER     1408u
#define DSV2L_LAYERS        27u
#define DSV2L_MOE_LAYERS    26u
#define DSV2L_EXPERTS       64u
#define DSV2L_TOPK          6u
#define DSV2L_KV_LORA       512u
#define DSV2L_ROPE_DIM      64u
#define DSV2L_VOCAB         102400.0
#define DSV2L_TOTAL_PARAMS  15.7e9

#define BF16_BYTES 2u

/* Routed-expert parameters of a model: layers x experts x hidden x inter x 3. */
#define EXPERT_PARAMS(l, e, h, i) ((double)(l) * (e) * (h) * (i) * 3.0)

/*
 * Dense bytes per step: every parameter that is not a routed expert or the
 * input embedding table (a step reads one row of it per token, the output
 * head whole) in bf16, from the model card's rounded total (+-0.05B: a few
 * percent of these figures).
 */
static const struct locus_sim_model models[] = {
	{
		.name = "qwen3-30b-a3b",
		.hidden = QWEN3_HIDDEN,
		.moe_intermediate = QWEN3_MOE_INTER,
		.moe_layers = QWEN3_LAYERS,
		.n_experts = QWEN3_EXPERTS,
		.top_k = QWEN3_TOPK,
		.dtype_bytes = BF16_BYTES,
		/* K and V: 2 x layers x kv heads x head_dim x 2 bytes = 98,304 */
		.kv_bytes_per_token = 2.0 * QWEN3_LAYERS * QWEN3_KV_HEADS * QWEN3_HEAD_DIM *
				      BF16_BYTES,
		.dense_bytes = (QWEN3_TOTAL_PARAMS -
				EXPERT_PARAMS(QWEN3_LAYERS, QWEN3_EXPERTS, QWEN3_HIDDEN,
					      QWEN3_MOE_INTER) -
				QWEN3_VOCAB * QWEN3_HIDDEN) * BF16_BYTES,
	},
	{
		.name = "deepseek-v2-lite",
		.hidden = DSV2L_HIDDEN,
		.moe_intermediate = DSV2L_MOE_INTER,
		.moe_layers = DSV2L_MOE_LAYERS,
		.n_experts = DSV2L_EXPERTS,
		.top_k = DSV2L_TOPK,
		.dtype_bytes = BF16_BYTES,
		/* MLA: (kv_lora_rank + qk_rope_head_dim) x 27 layers x 2 bytes = 31,104 */
		.kv_bytes_per_token = (double)(DSV2L_KV_LORA + DSV2L_ROPE_DIM) * DSV2L_LAYERS *
				      BF16_BYTES,
		.dense_bytes = (DSV2L_TOTAL_PARAMS -
				EXPERT_PARAMS(DSV2L_MOE_LAYERS, DSV2L_EXPERTS, DSV2L_HIDDEN,
					      DSV2L_MOE_INTER) -
				DSV2L_VOCAB * DSV2L_HIDDEN) * BF16_BYTES,
	},
};

/*
 * Peak HBM bandwidth from the vendors' datasheets: NVIDIA H100 Tensor Core
 * GPU datasheet, H100 SXM 3.35 TB/s (HBM3, 80 GB); AMD Instinct MI300X
 * datasheet, 5.3 TB/s (HBM3, 192 GB). Peak, not what a kernel achieves:
 * scale with --hbm-gbps.
 * Dense BF16 throughput (simulate --moe), the same datasheets: H100 SXM
 * "BF16 Tensor Core 1,979 teraFLOPS" is with sparsity, 989.5 dense; MI300X
 * "Peak BF16 1307.4 TFLOPs" dense (2614.9 with sparsity). --tflops overrides.
 */
static const struct locus_sim_gpu gpus[] = {
	{ .name = "h100-sxm", .hbm_bytes_per_s = 3.35e12, .bf16_flops = 989.5e12,
	  .fabric = "nvlink4-rdma400" },
	{ .name = "mi300x", .hbm_bytes_per_s = 5.3e12, .bf16_flops = 1307.4e12,
	  .fabric = "xgmi-rdma400" },
};

/*
 * Fabrics for simulate --moe, per GPU and direction (--intra-gbps and
 * --inter-gbps override):
 *   NVLink 4 (H100 SXM datasheet: "NVLink 900GB/s", both directions
 *   together; through NVSwitch any GPU pair gets it) 450 GB/s.
 *   AMD Infinity Fabric on the MI300X platform (MI300X datasheet: 7 links
 *   of 128 GB/s peak, both directions; 8 GPUs fully connected, so an
 *   all-to-all spreads over all 7) 7 x 64 = 448 GB/s.
 *   PCIe 4.0 x16 (PCI-SIG: 16 GT/s per lane, 128b/130b coding) 31.5 GB/s;
 *   the GRACE paper's RTX 4090 nodes (its "63 GB/s" is both directions).
 *   Between nodes one 400 Gb/s RDMA NIC per GPU (DGX H100 user guide: eight
 *   ConnectX-7 400 Gb/s InfiniBand/Ethernet ports for the compute fabric,
 *   one per GPU) 50 GB/s.
 */
static const struct locus_sim_fabric fabrics[] = {
	{ .name = "nvlink4-rdma400", .intra_bytes_per_s = 450e9, .inter_bytes_per_s = 50e9 },
	{ .name = "xgmi-rdma400", .intra_bytes_per_s = 448e9, .inter_bytes_per_s = 50e9 },
	{ .name = "pcie4-rdma400", .intra_bytes_per_s = 31.5e9, .inter_bytes_per_s = 50e9 },
};

/*
 * The entry of a preset table (n entries of size bytes, each starting with
 * its const char *name) named name, or NULL.
 */
static const void *by_name(const void *tab, size_t n, size_t size, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		const void *e = (const char *)tab + i * size;

		if (!strcmp(name, *(const char *const *)e))
			return e;
	}
	return NULL;
}

/* "a|b|c": the table's names for usage lines, joined into buf (the first call). */
static const char *names_of(char *buf, size_t len, const void *tab, size_t n, size_t size)
{
	size_t at = 0;

	if (buf[0])
		return buf;
	for (size_t i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? "|" : "",
				       *(const char *const *)((const char *)tab + i * size));
	return buf;
}

#define FIND(tab, name) by_name(tab, LOCUS_ARRAY_SIZE(tab), sizeof(tab[0]), name)
#define NAMES(buf, tab) names_of(buf, sizeof(buf), tab, LOCUS_ARRAY_SIZE(tab), sizeof(tab[0]))

const struct locus_sim_fabric *locus_sim_fabric_find(const char *name)
{
	return FIND(fabrics, name);
}

const char *locus_sim_fabric_names(void)
{
	static char buf[256];

	return NAMES(buf, fabrics);
}

const struct locus_sim_model *locus_sim_model_find(const char *name)
{
	return FIND(models, name);
}

const struct locus_sim_gpu *locus_sim_gpu_find(const char *name)
{
	return FIND(gpus, name);
}

const char *locus_sim_model_names(void)
{
	static char buf[256];

	return NAMES(buf, models);
}

const char *locus_sim_gpu_names(void)
{
	static char buf[256];

	return NAMES(buf, gpus);
}

double locus_sim_expert_bytes(const struct locus_sim_model *m)
{
	return (double)m->hidden * m->moe_intermediate * 3.0 * m->dtype_bytes;
}
