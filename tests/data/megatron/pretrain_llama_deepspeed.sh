#!/bin/bash
# A Megatron-DeepSpeed launch script in the style of its examples_deepspeed/ (written for
# commscope's tests; not from a run): the sizes in variables, the ds_config.json written by a
# here-document before the launch, the DeepSpeed flags gathered in a string, Megatron-DeepSpeed's
# own spellings (--num-key-value-heads, --use-rotary-position-embeddings, --normalization
# rmsnorm, --checkpoint-activations). A Llama-2-style 7B of GQA on 2 nodes of 8 GPUs, TP 2,
# ZeRO-1 under DeepSpeed's engine.
set -ex

SCRIPT_DIR=$(dirname "$(readlink -f "$0")")
BASE_PATH=${SCRIPT_DIR}/out-of-tree-never-written
DS_CONFIG=${BASE_PATH}/deepspeed.json

TP=2
PP=1
ZERO_STAGE=1

GPUS_PER_NODE=8
NNODES=2
MASTER_ADDR=localhost

HIDDEN_SIZE=4096
FFN_HIDDEN_SIZE=11008
NUM_LAYERS=32
NUM_HEADS=32
NUM_KV_HEADS=8
SEQ_LENGTH=4096

MICRO_BATCH_SIZE=2
GLOBAL_BATCH_SIZE=$((MICRO_BATCH_SIZE * GPUS_PER_NODE * NNODES / TP * 4))

activation_checkpoint="true"

cat <<EOT > $DS_CONFIG
{
  "train_batch_size" : $GLOBAL_BATCH_SIZE,
  "train_micro_batch_size_per_gpu": $MICRO_BATCH_SIZE,
  "steps_per_print": 10,
  "zero_optimization": {
    "stage": $ZERO_STAGE,
    "reduce_bucket_size": 5e8
  },
  "bf16": {
    "enabled": true
  },
  "comment": "don't \$EXPAND this"
}
EOT

ds_args=""
ds_args=" --deepspeed ${ds_args}"
ds_args=" --deepspeed_config=$DS_CONFIG ${ds_args}"
ds_args=" --zero-stage=$ZERO_STAGE ${ds_args}"

if [ "${activation_checkpoint}" = "true" ]; then
  ds_args="--deepspeed-activation-checkpointing ${ds_args}"
  ds_args="--checkpoint-activations ${ds_args}"
fi

DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --master_addr $MASTER_ADDR"

torchrun $DISTRIBUTED_ARGS \
       pretrain_gpt.py \
       --tensor-model-parallel-size $TP \
       --pipeline-model-parallel-size $PP \
       --num-layers $NUM_LAYERS \
       --hidden-size $HIDDEN_SIZE \
       --ffn-hidden-size $FFN_HIDDEN_SIZE \
       --num-attention-heads $NUM_HEADS \
       --num-key-value-heads $NUM_KV_HEADS \
       --micro-batch-size $MICRO_BATCH_SIZE \
       --global-batch-size $GLOBAL_BATCH_SIZE \
       --seq-length $SEQ_LENGTH \
       --max-position-embeddings $SEQ_LENGTH \
       --tokenizer-type GPTSentencePieceTokenizer \
       --vocab-size 32000 \
       --lr 3e-4 \
       --bf16 \
       --attention-dropout 0 \
       --hidden-dropout 0 \
       --use-rotary-position-embeddings \
       --untie-embeddings-and-output-weights \
       --swiglu \
       --normalization rmsnorm \
       --disable-bias-linear \
       --use-flash-attn-v2 \
       $ds_args
