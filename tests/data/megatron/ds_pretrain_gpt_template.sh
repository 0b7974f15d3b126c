#!/bin/bash
# A Megatron-DeepSpeed launch script in the style of its examples_deepspeed/rebase/ (written for
# commscope's tests; not from a run): the ds_config.json made from ds_config_TEMPLATE.json by a
# pipeline of sed substitutions, the flags gathered in strings and launched by eval. GPT-3 1.3B's
# shapes (Brown et al. 2020, Table 2.1) on 4 nodes of 8 GPUs, ZeRO-2, data parallel only.
dir=`pwd`
seq_len=2048
num_layers=24
hidden_size=2048
num_attn_heads=16
global_batch_size=512
batch_size=4
log_interval=10
zero_stage=2
prescale_grad="true"
mp_size=1
pp_size=1
no_pp="true"
num_gpus=32

config_json="ds_config_gbs${global_batch_size}_mbs${batch_size}_zero${zero_stage}.json"
template_json="ds_config_TEMPLATE.json"
sed "s/GBSIZE/${global_batch_size}/" ${template_json} \
    | sed "s/MBSIZE/${batch_size}/" \
    | sed "s/LOG_INTERVAL/${log_interval}/" \
    | sed "s/ZERO_STAGE/${zero_stage}/" \
    | sed "s/PRESCALE_GRAD/${prescale_grad}/" \
      > ${config_json}

megatron_options=" \
    --tensor-model-parallel-size ${mp_size} \
    --pipeline-model-parallel-size ${pp_size} \
    --num-layers ${num_layers} \
    --hidden-size ${hidden_size} \
    --num-attention-heads ${num_attn_heads} \
    --seq-length ${seq_len} \
    --max-position-embeddings ${seq_len} \
    --micro-batch-size ${batch_size} \
    --global-batch-size ${global_batch_size} \
    --log-interval ${log_interval} \
    --fp16"

deepspeed_options=" \
    --deepspeed \
    --deepspeed_config ${config_json} \
    --zero-stage ${zero_stage}"

if [[ "${no_pp}" = "true" ]]; then
deepspeed_options="${deepspeed_options} \
    --no-pipeline-parallel"
fi

run_cmd="deepspeed --num_gpus ${num_gpus} ${dir}/../../pretrain_gpt.py ${megatron_options} ${deepspeed_options} &>> log.txt"
echo ${run_cmd}
eval ${run_cmd}
