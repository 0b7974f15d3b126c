#!/bin/bash
# A Megatron-LM launch script in the style of Megatron-LM's newer examples (written for
# commscope's tests; not from a run): the sizes in variables, some with defaults the environment
# may override, the batch from shell arithmetic, the precision and the data chosen by `if`s.
# Mixtral 8x7B's shapes on 4 nodes of 8 GPUs, PP 4, EP 8, FP8.

# Environment variables for performance tuning
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}

CHECKPOINT_PATH=${1:-"checkpoints/mixtral_8x7b_fp8"}
DATA_ARG=${2:-"MOCK"}      # data prefix, or "MOCK"
DTYPE=${DTYPE:-"fp8"}      # "bf16" or "fp8"

GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-4}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

TP_SIZE=1
PP_SIZE=4
EP_SIZE=8
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=$(( WORLD_SIZE / (TP_SIZE * PP_SIZE) * 16 ))
NUM_LAYERS=32
SEQ_LENGTH=4096

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_addr ${MASTER_ADDR:-localhost}
    --master_port ${MASTER_PORT:-6000}
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers ${NUM_LAYERS}
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --seq-length "$SEQ_LENGTH"
    --max-position-embeddings 32768
    --position-embedding-type rope
    --swiglu
    --normalization RMSNorm
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
)

MOE_ARGS=(
    --num-experts 8
    --moe-router-topk 2
    --moe-token-dispatcher-type alltoall
    --moe-grouped-gemm
    --moe-aux-loss-coeff 1e-2
)

TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-iters 250000
    --lr 1.0e-4
    --bf16
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
)
if [[ "$DTYPE" == "fp8" ]]; then
    TRAINING_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
        "--fp8-amax-compute-algo max"
    )
elif [ "$DTYPE" != "bf16" ]; then
    echo "DTYPE must be bf16 or fp8, got $DTYPE"
    exit 1
fi

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --pipeline-model-parallel-size $PP_SIZE
    --expert-model-parallel-size $EP_SIZE
    --use-distributed-optimizer
)
if [[ -n "$SLURM_JOB_ID" ]]; then  # on the cluster, overlap the gradient reduction
    MODEL_PARALLEL_ARGS+=(--overlap-grad-reduce)
fi

DATA_ARGS=()
if [[ "$DATA_ARG" == "MOCK" ]]; then
    DATA_ARGS+=("--mock-data" "--tokenizer-type NullTokenizer" "--vocab-size 32000")
else
    DATA_ARGS+=(
        "--data-path $DATA_ARG"
        "--tokenizer-type HuggingFaceTokenizer"
        "--tokenizer-model mistralai/Mixtral-8x7B-v0.1"
        "--vocab-size 32768"
    )
fi

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${MOE_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    --save "$CHECKPOINT_PATH" --load "$CHECKPOINT_PATH"
