// Megatron-LM's model flags (apply_model_flags): a GPT from the flags alone against the Megatron
// closed form of Narayanan et al. 2021 (Eq. 2's parameter count, P = 12 l h^2 (1 + 13 / (12 h) +
// (V + s) / (12 l h)), plus the final LayerNorm's 2h); Megatron-LM's derived defaults
// (megatron/training/arguments.py: kv channels h / heads, the MLP 4h, under --swiglu
// int(4h x 2/3 / 64) x 64); the Llama 3 8B and Mixtral 8x7B architectures written as flags
// against their presets (the published counts of workload_params_test and
// workload_moe_test); a preset changed by flags; and the errors, each naming its flag.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "commscope/spec/model.h"
#include "commscope/spec/shell_words.h"
#include "commscope/workload/params.h"
#include "test_util.h"

namespace commscope {
namespace {

using testing::model;

ModelFlags gpt(std::int64_t layers, std::int64_t hidden, std::int64_t heads) {
  ModelFlags f;
  f.num_layers = layers;
  f.hidden_size = hidden;
  f.num_attention_heads = heads;
  return f;
}

TEST(ModelFlags, MegatronGptMatchesTheClosedForm) {
  // GPT-3 6.7B's shape (Brown et al. 2020, Table 2.1) at sequence 2048.
  auto m = apply_model_flags(std::nullopt, gpt(32, 4096, 32), 2048);
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->name, "megatron-gpt");
  EXPECT_EQ(m->head_dim, 128);
  EXPECT_EQ(m->ffn, 4 * 4096);
  EXPECT_EQ(m->vocab, 50304);  // GPT-2's 50,257 padded to a multiple of 128
  EXPECT_EQ(m->seq_length, 2048);
  EXPECT_TRUE(m->tied_embeddings);
  EXPECT_TRUE(m->bias);
  EXPECT_TRUE(m->dropout);
  ASSERT_EQ(m->notes.size(), 1u);  // the vocabulary it assumed
  const std::int64_t l = 32, h = 4096, V = 50304, s = 2048;
  EXPECT_EQ(count_params(*m).total, 12 * l * h * h + 13 * l * h + (V + s) * h + 2 * h);
  // --vocab-size replaces the assumption (and its note); --max-position-embeddings the table.
  ModelFlags f = gpt(32, 4096, 32);
  f.vocab_size = 51200;
  f.max_position_embeddings = 4096;
  auto v = apply_model_flags(std::nullopt, f, 2048);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->notes.empty());
  EXPECT_EQ(count_params(*v).total, count_params(*m).total + (51200 - V) * h + (4096 - s) * h);
}

TEST(ModelFlags, MegatronDerivedDefaults) {
  ModelFlags f = gpt(2, 4096, 32);
  f.swiglu = true;
  auto m = apply_model_flags(std::nullopt, f, 1024);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->ffn, 10880);  // int(16384 x 2/3 / 64) x 64 = int(170.67) x 64
  f.kv_channels = 64;
  f.ffn_hidden_size = 11008;
  auto k = apply_model_flags(std::nullopt, f, 1024);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->head_dim, 64);
  EXPECT_EQ(k->q_dim(), 32 * 64);
  EXPECT_EQ(k->ffn, 11008);
  // Rotary positions have no table; a dropout of 0 for both stores no masks.
  f.position_embedding = PositionEmbedding::rotary;
  f.attention_dropout = 0;
  f.hidden_dropout = 0;
  auto r = apply_model_flags(std::nullopt, f, 1024);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->max_positions, 0);
  EXPECT_FALSE(r->dropout);
  EXPECT_EQ(count_params(*r).embedding, r->vocab * r->hidden);
}

// Llama 3 8B and Mixtral 8x7B as their Megatron-LM flags: the presets' architecture, the same
// parameters (published: 8,030,261,248; Mixtral's 46,702,792,704 total, 12,879,925,248 active).
TEST(ModelFlags, LlamaAndMixtralWrittenAsFlagsAreTheirPresets) {
  auto llama_like = [](std::int64_t ffn, std::int64_t vocab) {
    ModelFlags f = gpt(32, 4096, 32);
    f.ffn_hidden_size = ffn;
    f.group_query_attention = true;
    f.num_query_groups = 8;
    f.swiglu = true;
    f.normalization = NormKind::rmsnorm;
    f.position_embedding = PositionEmbedding::rotary;
    f.untie_embeddings = true;
    f.disable_bias_linear = true;
    f.vocab_size = vocab;
    f.attention_dropout = 0;
    f.hidden_dropout = 0;
    f.use_flash_attn = true;
    return f;
  };
  auto llama = apply_model_flags(std::nullopt, llama_like(14336, 128256), 8192);
  ASSERT_TRUE(llama.ok()) << llama.error().message;
  const ModelSpec preset = model("llama3-8b");
  EXPECT_EQ(count_params(*llama).total, 8030261248);
  EXPECT_EQ(count_params(*llama).total, count_params(preset).total);
  for (auto [got, want] : {std::pair{llama->kv_heads, preset.kv_heads},
                           {llama->head_dim, preset.head_dim},
                           {llama->ffn, preset.ffn},
                           {llama->vocab, preset.vocab}})
    EXPECT_EQ(got, want);
  EXPECT_EQ(llama->norm, preset.norm);
  EXPECT_EQ(llama->mlp, preset.mlp);
  EXPECT_EQ(llama->position, preset.position);
  EXPECT_EQ(llama->dropout, preset.dropout);
  EXPECT_EQ(llama->flash_attention, preset.flash_attention);

  ModelFlags mf = llama_like(14336, 32000);
  mf.num_experts = 8;  // --moe-router-topk left at Megatron-LM's 2
  auto mixtral = apply_model_flags(std::nullopt, mf, 4096);
  ASSERT_TRUE(mixtral.ok()) << mixtral.error().message;
  const ParamCount c = count_params(*mixtral), p = count_params(model("mixtral-8x7b"));
  EXPECT_EQ(mixtral->experts_per_token, 2);
  EXPECT_EQ(c.total, p.total);
  EXPECT_EQ(c.active, p.active);
  EXPECT_EQ(c.total, 46702792704);
  EXPECT_EQ(c.active, 12879925248);
}

TEST(ModelFlags, APresetChangedByFlags) {
  const ModelSpec base = model("llama3-8b");
  ModelFlags f;
  f.num_layers = 16;
  auto half = apply_model_flags(base, f, 0);
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->name, "llama3-8b (--num-layers 16)");
  EXPECT_EQ(half->decoder_layers, 16);
  EXPECT_EQ(count_params(*half).total,
            count_params(base).total - 16 * block_params(base, 0));  // every block alike
  EXPECT_EQ(half->kv_heads, base.kv_heads);
  EXPECT_EQ(half->seq_length, base.seq_length);
  EXPECT_TRUE(half->notes.empty());
  // A new width re-derives the channels per head, as Megatron-LM derives kv_channels; the MLP
  // keeps the preset's unless given.
  ModelFlags w;
  w.hidden_size = 2048;
  auto narrow = apply_model_flags(base, w, 0);
  ASSERT_TRUE(narrow.ok());
  EXPECT_EQ(narrow->head_dim, 2048 / 32);
  EXPECT_EQ(narrow->ffn, base.ffn);
  // New heads: every head its own key/value unless --num-query-groups says.
  ModelFlags h;
  h.num_attention_heads = 16;
  auto heads = apply_model_flags(base, h, 0);
  ASSERT_TRUE(heads.ok());
  EXPECT_EQ(heads->kv_heads, 16);
  EXPECT_EQ(heads->head_dim, 256);
  // A shorter position table with the sequence that fits it (Megatron-LM's --seq-length beside
  // --max-position-embeddings): checked against that sequence, not the preset's (gpt2-small's
  // 1024 positions cut to 512 for 512 tokens was refused, "got 1024", until 2026-12-01); a
  // sequence above the table is still refused.
  ModelFlags p;
  p.max_position_embeddings = 512;
  auto short_table = apply_model_flags(model("gpt2-small"), p, 512);
  ASSERT_TRUE(short_table.ok()) << short_table.error().message;
  EXPECT_EQ(short_table->seq_length, 512);
  EXPECT_EQ(short_table->max_positions, 512);
  EXPECT_FALSE(apply_model_flags(model("gpt2-small"), p, 0).ok());
  EXPECT_FALSE(apply_model_flags(model("gpt2-small"), p, 1024).ok());
}

TEST(ModelFlags, ErrorsNameTheFlag) {
  const ModelSpec llama = model("llama3-8b");
  auto expect = [](const Result<ModelSpec>& r, const std::string& want) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().message.rfind(want, 0), 0u) << r.error().message;
  };
  ModelFlags f = gpt(4, 96, 3);
  expect(apply_model_flags(std::nullopt, f, 0), "--seq-length: expected the tokens per sample");
  ModelFlags missing;
  missing.num_layers = 4;
  expect(apply_model_flags(std::nullopt, missing, 128), "--hidden-size: expected a value");
  expect(apply_model_flags(std::nullopt, gpt(4, 100, 3), 128),
         "--num-attention-heads: expected a divisor of --hidden-size 100");
  expect(apply_model_flags(std::nullopt, gpt(0, 96, 3), 128),
         "--num-layers: expected an integer from 1 to 4096");
  ModelFlags groups = gpt(4, 96, 3);
  groups.num_query_groups = 3;
  expect(apply_model_flags(std::nullopt, groups, 128),
         "--num-query-groups: expected --group-query-attention beside it");
  groups.group_query_attention = true;
  groups.num_query_groups = 2;
  expect(apply_model_flags(std::nullopt, groups, 128),
         "--num-query-groups: expected heads (3) a multiple of the query groups (2)");
  ModelFlags topk;
  topk.moe_router_topk = 4;
  expect(apply_model_flags(llama, topk, 0), "--moe-router-topk: expected --num-experts");
  ModelFlags drop = gpt(4, 96, 3);
  drop.hidden_dropout = 1.5;
  expect(apply_model_flags(std::nullopt, drop, 128), "--hidden-dropout: expected a probability");
  ModelFlags layers;
  layers.num_layers = 4;
  expect(apply_model_flags(model("t5-small"), layers, 0),
         "--num-layers 4: expected a decoder-only model");
  ModelFlags mla;
  mla.num_attention_heads = 8;
  expect(apply_model_flags(model("deepseek-v3"), mla, 0),
         "--num-attention-heads 8: expected no attention-shape flags for deepseek-v3");
}

}  // namespace
}  // namespace commscope

namespace commscope {
namespace {

// The shell's word splitting of a launch script (spec/shell_words.h), as bash splits these lines:
// comments, continuations, quotes, bash arrays, variables left as written.
TEST(ShellWords, AsTheShellSplitsThem) {
  const std::string script =
      "#!/bin/bash\n"
      "ARGS=(\n"
      "    --num-layers 32   # the depth\n"
      "    --tokenizer-model \"meta-llama/Meta Llama\" --split '949,50,1'\n"
      ")\n"
      "torchrun pretrain_gpt.py ${ARGS[@]} \\\n"
      "    --data-path $DATA --name a\\ b --q \"say \\\"hi\\\"\"; echo done\n";
  auto words = shell_words(script, "s.sh");
  ASSERT_TRUE(words.ok()) << words.error().message;
  std::vector<std::string> texts;
  std::vector<int> lines;
  for (const auto& w : *words) {
    texts.push_back(w.text);
    lines.push_back(w.line);
  }
  const std::vector<std::string> want = {"ARGS=",
                                         "--num-layers",
                                         "32",
                                         "--tokenizer-model",
                                         "meta-llama/Meta Llama",
                                         "--split",
                                         "949,50,1",
                                         "torchrun",
                                         "pretrain_gpt.py",
                                         "${ARGS[@]}",
                                         "--data-path",
                                         "$DATA",
                                         "--name",
                                         "a b",
                                         "--q",
                                         "say \"hi\"",
                                         "echo",
                                         "done"};
  EXPECT_EQ(texts, want);
  EXPECT_EQ(lines[1], 3);   // --num-layers
  EXPECT_EQ(lines[10], 7);  // --data-path, after the continuation
  // An unclosed quote names the line it opened on.
  auto open = shell_words("--a 1\n--b 'x\ny\n", "q.sh");
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.error().message,
            "q.sh:2: expected a closing ' for the quote opened here, got the end of the file");
}

// read_shell_script against what bash prints for the same lines (each case was run through
// bash 5.2 here, `printf '[%s]' ...`, and its output is what is expected): assignments,
// ${X:-default}, arithmetic, quotes, and what cannot be known kept as written and marked.
TEST(ShellWords, ExpandedAsBashExpandsThem) {
  const std::string script =
      "A=2\n"
      "B=${A}0; C=$(( A * B + 1 )); N=$((-(3 - 10) % 4))\n"
      "D=${UNSET:-\"x y\"}\n"
      "E=${E:-$A}\n"
      "F=${A:-9} G=${EMPTY-z}\n"
      "EMPTY=\n"
      "H=${EMPTY:-h} I=${EMPTY-i}\n"
      "A+=1\n"
      "echo $A $B $C $N \"$D\" $E $F $G $H \"$I\" '$A' \\$A \"${A}x\" $(cmd) ${ARR[@]} $UNSET $1\n";
  auto words = read_shell_script(script, "s.sh");
  ASSERT_TRUE(words.ok()) << words.error().message;
  std::vector<std::string> echo;
  bool seen = false;
  for (const auto& w : words->words) {
    if (w.text == "echo") seen = true;
    if (seen && w.text != "echo") echo.push_back(w.text + (w.unresolved ? " ?" : ""));
  }
  // bash: [21][20][41][3][x y][2][2][z][h][][$A][$A][21x] and then what it runs or is unset
  const std::vector<std::string> want = {"21",  "20",       "41",          "3",        "x y", "2",
                                         "2",   "z",        "h",           "",         "$A",  "$A",
                                         "21x", "$(cmd) ?", "${ARR[@]} ?", "$UNSET ?", "$1 ?"};
  EXPECT_EQ(echo, want);
  // Which defaults each value took: E's own (the environment may set E), not A's.
  auto e = std::find_if(words->words.begin(), words->words.end(),
                        [](const ShellWord& w) { return w.text == "E=2"; });
  ASSERT_NE(e, words->words.end());
  EXPECT_EQ(e->defaults, std::vector<std::string>{"E"});
  // A here-document's body is data (Megatron-DeepSpeed's scripts write ds_config.json so): no
  // words, an apostrophe in it no open quote; `<<-` strips the delimiter line's tabs.
  auto here = read_shell_script(
      "cat <<EOF > $C.json\n{ \"don't\": \"--num-layers 9\" }\nEOF\n"
      "cat <<-'END'\n\t--num-layers 8\n\tEND\necho --a $((1<<2))",
      "h.sh");
  ASSERT_TRUE(here.ok()) << here.error().message;
  std::vector<std::string> here_words;
  for (const auto& w : here->words) here_words.push_back(w.text + ":" + std::to_string(w.line));
  EXPECT_EQ(here_words, (std::vector<std::string>{"cat:1", ">:1", "$C.json:1", "cat:4", "echo:7",
                                                  "--a:7", "$((1<<2)):7"}));
  // A backslash before a newline inside double quotes joins the lines (bash: [   --a 1]).
  auto joined = read_shell_script("O=\" \\\n  --a 1\"\necho \"$O\"", "j.sh");
  ASSERT_TRUE(joined.ok());
  ASSERT_EQ(joined->words.size(), 3u);
  EXPECT_EQ((joined->words)[2].text, "   --a 1");
  EXPECT_EQ((joined->words)[2].line, 3);
  // What arithmetic cannot know stays as written: an unset name, division by zero, overflow,
  // an operator it does not take (bash: 8).
  auto arith = read_shell_script(
      "echo $((X + 1)) $((1 / 0)) $((9223372036854775807 + 1)) $((2 ** 3)) $((7/2))", "a.sh");
  ASSERT_TRUE(arith.ok());
  ASSERT_EQ(arith->words.size(), 6u);
  for (std::size_t i = 1; i < 5; ++i)
    EXPECT_TRUE((arith->words)[i].unresolved) << (arith->words)[i].text;
  EXPECT_EQ((arith->words)[5].text, "3");
  EXPECT_FALSE((arith->words)[5].unresolved);
}

// The branch bash would run: decided conditions pick one branch (the others' words and
// assignments are dropped); an undecided one keeps every branch, marked with its line; a branch
// chosen by a default carries that default.
TEST(ShellWords, TakesTheBranchBashWouldRun) {
  const std::string script =
      "P=${P:-fp8}; N=4\n"
      "if [[ \"$P\" == \"fp8\" ]]; then\n"
      "  X=--fp8\n"
      "elif [ \"$P\" = bf16 ]; then\n"
      "  X=--bf16\n"
      "else\n"
      "  X=--fp16\n"
      "fi\n"
      "if [ $N -gt 8 ] || [[ -z \"$P\" ]]; then big; elif ! [[ $N -eq 3 ]] && [[ -n $N ]]; then "
      "mid; else small; fi\n"
      "if [[ -n \"$SLURM_JOB_ID\" ]]; then\n"
      "  cluster\n"
      "  if [[ 1 == 1 ]]; then inner; fi\n"
      "else\n"
      "  local\n"
      "fi\n"
      "if [[ $P == fp* ]]; then glob; fi\n"
      "echo $X\n";
  auto words = read_shell_script(script, "s.sh");
  ASSERT_TRUE(words.ok()) << words.error().message;
  std::vector<std::string> got;
  for (const auto& w : words->words)
    if (w.text.find('=') == std::string::npos)
      got.push_back(w.text + (w.unknown_if ? "@" + std::to_string(w.unknown_if) : ""));
  // bash (SLURM_JOB_ID unset): mid, local, glob, --fp8; commscope cannot know SLURM_JOB_ID nor
  // decide a pattern, so both of that if's branches and the glob's are kept, marked.
  const std::vector<std::string> want = {"mid",     "cluster@10", "inner@10", "local@10",
                                         "glob@16", "echo",       "--fp8"};
  EXPECT_EQ(got, want);
  auto fp8 = std::find_if(words->words.begin(), words->words.end(),
                          [](const ShellWord& w) { return w.text == "--fp8"; });
  ASSERT_NE(fp8, words->words.end());
  EXPECT_EQ(fp8->defaults, std::vector<std::string>{"P"});
}

// The files a script writes before it launches, as bash writes them (each expected text is what
// bash 5.2 wrote for this script, run in a folder holding in.txt): here-documents expanded or not,
// appended to, `echo`, a pipeline of sed substitutions over a file beside the script (`&`, `\1`,
// `g`, another delimiter, -e); a branch bash skips writes nothing; another command's file is
// named as unread. $0 is the script, and dirname, basename, readlink -f and `cd D && pwd` give
// what they print.
TEST(ShellWords, KeepsTheFilesTheScriptWrites) {
  const std::filesystem::path dir = testing::scratch() + "writes";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "in.txt") << "abab xN\n";
  const std::string script =
      "N=3\n"
      "D=$(dirname \"$(readlink -f \"$0\")\")\n"
      "B=$(basename /a/b/c.json .json)\n"
      "cat <<EOF > one.json\n"
      "{\"n\": $N, \"sum\": $((N+1)), \"lit\": \"\\$N\", \"q\": \"it's\"}\n"
      "EOF\n"
      "cat > two.txt <<'EOF'\n"
      "$N stays\n"
      "EOF\n"
      "cat <<EOF >> two.txt\n"
      "and $N\n"
      "EOF\n"
      "echo \"x $N\" > three.txt\n"
      "sed -e 's|a\\(b\\)|<&\\1>|g' -e \"s/N/$N/\" in.txt | sed 's/x/y/' > four.txt\n"
      "if [[ $N == 4 ]]; then\n"
      "  cat <<EOF > five.txt\n"
      "no\n"
      "EOF\n"
      "fi\n"
      "python gen.py > six.json\n"
      "echo $D $B $(cd \"$D\" && pwd)\n";
  const std::string path = (dir / "s.sh").string();
  std::ofstream(path) << script;
  auto read = read_shell_script(script, path);
  ASSERT_TRUE(read.ok()) << read.error().message;
  const std::map<std::string, std::string> want = {
      {"one.json", "{\"n\": 3, \"sum\": 4, \"lit\": \"$N\", \"q\": \"it's\"}\n"},
      {"two.txt", "$N stays\nand 3\n"},
      {"three.txt", "x 3\n"},
      {"four.txt", "<abb><abb> y3\n"}};
  std::map<std::string, std::string> got;
  for (const auto& [file, written] : read->files) got[file] = written.text;
  EXPECT_EQ(got, want);
  EXPECT_EQ(read->files.at("four.txt").how, "sed over " + (dir / "in.txt").string());
  EXPECT_EQ(read->files.at("one.json").line, 4);
  ASSERT_EQ(read->unread.count("six.json"), 1u);
  EXPECT_EQ(read->unread.at("six.json"), path + ":20: 'python', a command commscope does not run");
  std::vector<std::string> echo;
  for (const auto& w : read->words)
    if (w.line == 21) echo.push_back(w.text);
  const std::string real = std::filesystem::canonical(dir).string();
  EXPECT_EQ(echo, (std::vector<std::string>{"echo", real, "c", real}));
  // The same key for the paths a flag may name it by.
  EXPECT_EQ(script_file_key("./tmp//a.json"), script_file_key("tmp/a.json"));
  // What a body leaves as written is named; the file count is bounded with the expansions.
  auto unset = read_shell_script("cat <<EOF > u.json\n{\"stage\": $Z}\nEOF\n", "u.sh");
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(unset->files.at("u.json").unresolved, "$Z");
  // A template line too long for std::regex's recursion is not substituted, but named.
  std::ofstream(dir / "long.txt") << std::string(5000, 'x') << "\n";
  const std::string long_path = (dir / "l.sh").string();
  auto long_line = read_shell_script("sed 's/x*/y/' long.txt > l.json\n", long_path);
  ASSERT_TRUE(long_line.ok());
  EXPECT_EQ(long_line->files.count("l.json"), 0u);
  ASSERT_EQ(long_line->unread.count("l.json"), 1u);
  EXPECT_NE(long_line->unread.at("l.json").find("a line of over 4096 characters"),
            std::string::npos);
  std::string big = "A=" + std::string(1 << 20, 'x') + "\n";
  for (int i = 0; i < 5; ++i) big += "cat <<EOF > f" + std::to_string(i) + "\n$A\nEOF\n";
  auto bounded = read_shell_script(big, "b.sh");
  ASSERT_FALSE(bounded.ok());
  EXPECT_NE(bounded.error().message.find("expected expansions of at most 4194304 characters"),
            std::string::npos)
      << bounded.error().message;
}

// `source` and `.` read the file's words where they stand, with the same variables (bash 5.2
// prints "--num-layers 24 --hidden-size 2048 --tp 2" for the echo lines below, with a
// "No such file" for ./missing.sh and for /x.sh, and goes on); a path left as written or a file
// that cannot be read is named; a file that sources itself stops at the depth bound.
TEST(ShellWords, FollowsTheFilesItSources) {
  const std::filesystem::path dir = testing::scratch() + "sources";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "conf.sh") << "NL=24\nif [[ $NL -gt 8 ]]; then HS=2048; else HS=1; fi\n"
                                    "source \"$SCRIPT_DIR/deeper.sh\"\n";
  std::ofstream(dir / "deeper.sh") << "TP=2\n";
  const std::string script =
      "SCRIPT_DIR=$(dirname \"$(readlink -f \"$0\")\")\n"
      "source \"${SCRIPT_DIR}/conf.sh\"\n"
      ". ./missing.sh\n"
      "source $UNSET/x.sh\n"
      "echo --num-layers $NL --hidden-size $HS --tp $TP\n";
  const std::string path = (dir / "main.sh").string();
  std::ofstream(path) << script;
  auto read = read_shell_script(script, path);
  ASSERT_TRUE(read.ok()) << read.error().message;
  std::vector<std::string> echo;
  for (const auto& w : read->words)
    if (w.line == 5 && w.source == 0) echo.push_back(w.text);
  EXPECT_EQ(echo, (std::vector<std::string>{"echo", "--num-layers", "24", "--hidden-size", "2048",
                                            "--tp", "2"}));
  const std::string real = std::filesystem::canonical(dir).string();
  ASSERT_EQ(read->sources.size(), 3u);
  EXPECT_EQ(read->sources[1], real + "/conf.sh");
  EXPECT_EQ(read->sourced,
            (std::vector<std::string>{real + "/conf.sh (line 2 of " + path + ")",
                                      real + "/deeper.sh (line 3 of " + real + "/conf.sh)"}));
  // the words of a sourced file name their file
  auto tp = std::find_if(read->words.begin(), read->words.end(),
                         [](const ShellWord& w) { return w.text == "TP=2"; });
  ASSERT_NE(tp, read->words.end());
  EXPECT_EQ(tp->source, 2);
  EXPECT_EQ(tp->line, 1);
  ASSERT_EQ(read->unfollowed.size(), 2u);
  EXPECT_EQ(read->unfollowed[0].rfind(path + ":3: . ./missing.sh (./missing.sh: cannot open", 0),
            0u)
      << read->unfollowed[0];
  EXPECT_EQ(read->unfollowed[1], path + ":4: source $UNSET/x.sh (a path left as written)");
  // A file that sources itself: read 8 deep, then named, not an endless loop.
  const std::string self = (dir / "self.sh").string();
  std::ofstream(self) << "N+=x\nsource \"$0\"\n";
  auto loop = read_shell_script("N+=x\nsource \"$0\"\necho $N\n", self);
  ASSERT_TRUE(loop.ok()) << loop.error().message;
  ASSERT_EQ(loop->unfollowed.size(), 1u);
  EXPECT_NE(loop->unfollowed[0].find("(sourced files nested deeper than 8)"), std::string::npos)
      << loop->unfollowed[0];
  EXPECT_EQ(loop->words.back().text, "xxxxxxxx");
}

// Expansions stay bounded: a variable doubled line after line is an error, not an allocation
// without bound; an unclosed $( names its line.
TEST(ShellWords, ExpansionIsBounded) {
  std::string script = "A=" + std::string(1000, 'x') + "\n";
  for (int i = 0; i < 30; ++i) script += "A=$A$A\n";
  auto doubled = read_shell_script(script, "d.sh");
  ASSERT_FALSE(doubled.ok());
  EXPECT_NE(doubled.error().message.find("d.sh:"), std::string::npos);
  EXPECT_NE(doubled.error().message.find("expected expansions of at most 4194304 characters"),
            std::string::npos)
      << doubled.error().message;
  auto open = read_shell_script("A=1\nB=$(echo\n", "o.sh");
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.error().message,
            "o.sh:2: expected a closing ) for the $( opened here, got the end of the file");
  // Every prefix of a script with each construct is read or refused with a message, and odd
  // text is too: never a crash, never an unbounded loop.
  const std::string all =
      "A=${B:-\"x ${C:-$((1+(2*3)))}\"} `cmd` $(a $(b)) ${#A} ${A/x/y} $((--1)) $((2-)) $\n"
      "if [[ ! $A == \"x\" ]] && [ -n \"$A\" ] || [[ 1 -lt 2 ]]; then X=$((A)); elif [; then\n"
      "else fi fi then if [[ ]]; then then ${A:=${A:=$A}} \\\n'$A' \"\\$A\" ${1:-z} $@\n"
      "cat <<-'E' > f\n\t--x 'y\n\tE\ncat <<EOF\nz";
  for (std::size_t n = 0; n <= all.size(); ++n) {
    auto r = read_shell_script(all.substr(0, n), "p.sh");
    if (!r.ok()) {
      EXPECT_EQ(r.error().message.rfind("p.sh:", 0), 0u) << r.error().message;
    }
  }
}

}  // namespace
}  // namespace commscope
