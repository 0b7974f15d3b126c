#!/bin/bash
# A Megatron-LM launch script in the style of Megatron-LM's examples (written for commscope's
# tests; not from a run): Llama 3 8B on 2 nodes of 8 GPUs, TP 2, PP 2, bf16.
export CUDA_DEVICE_MAX_CONNECTIONS=1

CHECKPOINT_PATH=$1
DATA_PATH=$2
GPUS_PER_NODE=8
NUM_NODES=2

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_addr localhost --master_port 6000
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention --num-query-groups 8
    --seq-length 8192 --max-position-embeddings 8192
    --position-embedding-type rope
    --swiglu --normalization RMSNorm
    --untie-embeddings-and-output-weights --disable-bias-linear
    --attention-dropout 0.0 --hidden-dropout 0.0   # Llama trains without dropout
    --vocab-size 128256
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 128
    --train-iters 500000
    --lr 3.0e-4 --min-lr 3.0e-5 --lr-decay-style cosine
    --weight-decay 0.1 --clip-grad 1.0
    --bf16
    --use-flash-attn
    --recompute-activations
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 2
    --sequence-parallel
    --use-distributed-optimizer
    --overlap-grad-reduce
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model "meta-llama/Meta-Llama-3-8B"
    --split 949,50,1
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    --save $CHECKPOINT_PATH --load $CHECKPOINT_PATH
