#include "plan/model_info.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "engine/generate.h"
#include "ggml.h"
#include "gguf.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "test_util.h"

namespace tandem::plan {
namespace {

using tandem::testing::ScratchDir;
using tandem::testing::write_file;

std::string write_tiny(const ScratchDir& dir, const std::string& name = "tiny.gguf") {
  const std::string path = dir.file(name);
  auto r = synth::write_model(synth::preset("tiny").value(), path, {});
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return path;
}

// Splits `src` into `n` files the way llama.cpp's gguf-split does: all metadata in the first,
// split.no / split.count / split.tensors.count in each, tensors dealt out in order.
std::vector<std::string> split_gguf(const std::string& src, const std::string& prefix, int n) {
  ggml_context* data = nullptr;
  gguf_context* in = gguf_init_from_file(src.c_str(), {/*no_alloc=*/false, &data});
  EXPECT_NE(in, nullptr);
  const int64_t n_tensors = gguf_get_n_tensors(in);
  std::vector<std::string> paths;
  for (int part = 0; part < n; ++part) {
    gguf_context* out = gguf_init_empty();
    if (part == 0) gguf_set_kv(out, in);
    gguf_set_val_u16(out, "split.no", static_cast<uint16_t>(part));
    gguf_set_val_u16(out, "split.count", static_cast<uint16_t>(n));
    gguf_set_val_i32(out, "split.tensors.count", static_cast<int32_t>(n_tensors));
    const int64_t per = (n_tensors + n - 1) / n;
    for (int64_t i = part * per; i < std::min(n_tensors, (part + 1) * per); ++i) {
      gguf_add_tensor(out, ggml_get_tensor(data, gguf_get_tensor_name(in, i)));
    }
    char name[64];
    std::snprintf(name, sizeof name, "-%05d-of-%05d.gguf", part + 1, n);
    paths.push_back(prefix + name);
    EXPECT_TRUE(gguf_write_to_file(out, paths.back().c_str(), false));
    gguf_free(out);
  }
  gguf_free(in);
  ggml_free(data);
  return paths;
}

TEST(ModelInfo, ActiveBytesMatchAHandComputedModel) {
  ScratchDir dir;
  synth::ModelSpec s = synth::preset("tiny").value();
  s.type = GGML_TYPE_F32;  // 4 bytes per parameter makes the arithmetic exact
  s.n_layer = 2;
  s.n_layer_dense_lead = 1;
  ASSERT_TRUE(synth::write_model(s, dir.file("m.gguf"), {}).is_ok());
  auto info = read_model_info(dir.file("m.gguf"));
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();

  // E=256, H=4, Hkv=2, Dh=64, Fd=512, Fe=256, 4 experts (2 used), 1 shared, indexer 2x64, V rows
  // of the preset's tokenizer (read from the file: the arithmetic holds for any vocabulary).
  const uint64_t V = info->n_vocab;
  ASSERT_GT(V, 1000u);
  const uint64_t embedding = 256;  // one row
  const uint64_t attention_layer = 256 + 256 * 256 + 2 * 256 * 128 + 256 * 256 + 2 * 64;
  const uint64_t indexer = 256 * 128 + 256 * 64 + 2 * 64;  // MoE layer only
  const uint64_t norms = 2 * 256;                          // ffn_norm of both layers
  const uint64_t dense = 3 * 256 * 512;                    // layer 0
  const uint64_t router = 256 * 4 + 4;                     // gate_inp + exp_probs_b
  const uint64_t routed = 3 * 256 * 256 * 2;               // 2 of 4 experts
  const uint64_t shared = 3 * 256 * 256;
  const uint64_t output = 256 + 256 * V;
  EXPECT_EQ(info->active.embedding, 4 * embedding);
  EXPECT_EQ(info->active.attention, 4 * (2 * attention_layer + indexer));
  EXPECT_EQ(info->active.norm, 4 * norms);
  EXPECT_EQ(info->active.dense_ffn, 4 * dense);
  EXPECT_EQ(info->active.router, 4 * router);
  EXPECT_EQ(info->active.routed_experts, 4 * routed);
  EXPECT_EQ(info->active.shared_experts, 4 * shared);
  EXPECT_EQ(info->active.output, 4 * output);
  EXPECT_EQ(info->active_bytes_per_token(),
            4 * (embedding + 2 * attention_layer + indexer + norms + dense + router + routed + shared + output));
  EXPECT_EQ(info->n_params, info->tensor_bytes / 4);
}

TEST(ModelInfo, JsonHasTheDocumentedFields) {
  ScratchDir dir;
  auto info = read_model_info(write_tiny(dir));
  ASSERT_TRUE(info.is_ok());
  const std::string json = model_info_to_json(info.value());
  for (const char* key :
       {"\"arch\": \"minimax-m3\"", "\"n_layer\": 4", "\"n_params\"", "\"bytes\"", "\"active_bytes_per_token\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
}

TEST(ModelInfo, ReadsSplitModelsAsOne) {
  ScratchDir dir;
  const std::string whole = write_tiny(dir);
  auto parts = split_gguf(whole, dir.file("tiny"), 3);
  auto a = read_model_info(whole);
  auto b = read_model_info(parts[0]);
  ASSERT_TRUE(a.is_ok());
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(b->files.size(), 3u);
  EXPECT_EQ(b->tensors.size(), a->tensors.size());
  EXPECT_EQ(b->n_params, a->n_params);
  EXPECT_EQ(b->active_bytes_per_token(), a->active_bytes_per_token());
  EXPECT_EQ(b->tensors.back().split, 2);

  // llama.cpp loads the same splits and generates the same tokens as from the whole file.
  engine::GenerateOptions g;
  g.prompt = "hello";
  g.n_predict = 4;
  g.n_ctx = 64;
  g.ignore_eos = true;
  g.model = whole;
  auto from_whole = engine::generate(g);
  g.model = parts[0];
  auto from_splits = engine::generate(g);
  ASSERT_TRUE(from_whole.is_ok() && from_splits.is_ok()) << from_splits.status().to_string();
  EXPECT_EQ(from_whole->tokens, from_splits->tokens);
}

TEST(ModelInfo, SplitErrorsNameTheMissingFile) {
  ScratchDir dir;
  auto parts = split_gguf(write_tiny(dir), dir.file("tiny"), 2);
  auto second = read_model_info(parts[1]);
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find("pass the first split"), std::string::npos) << second.status().message();
  std::filesystem::remove(parts[1]);
  auto missing = read_model_info(parts[0]);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find(parts[1]), std::string::npos) << missing.status().message();
}

struct BadFile {
  const char* name;
  std::string bytes;
  const char* expected;  // part of the message
};

TEST(ModelInfo, CorruptFilesGiveAMessageNamingTheFile) {
  ScratchDir dir;
  const std::string tiny = write_tiny(dir);
  std::ifstream in(tiny, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  std::string bad_version = good;
  bad_version[4] = 99;
  std::string huge_count = good;
  for (int i = 8; i < 16; ++i) huge_count[i] = '\xff';
  const BadFile cases[] = {
      {"empty.gguf", "", "magic"},
      {"text.gguf", "this is not a model, just some text\n", "magic"},
      {"header-cut.gguf", good.substr(0, 100), ""},
      {"table-cut.gguf", good.substr(0, 4000), ""},
      {"data-cut.gguf", good.substr(0, good.size() / 2), "truncated"},
      {"version.gguf", bad_version, "version"},
      {"tensor-count.gguf", huge_count, "number of tensors"},
  };
  for (const BadFile& c : cases) {
    const std::string path = dir.file(c.name);
    write_file(path, c.bytes);
    auto r = read_model_info(path);
    ASSERT_FALSE(r.is_ok()) << c.name;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << c.name << ": " << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << "one line: " << r.status().message();
  }
}

// A GGUF v3 with one F32 tensor of the given shape, written byte by byte.
std::string gguf_with_shape(const std::vector<uint64_t>& ne) {
  std::string b = "GGUF";
  auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& v) {
    u64(v.size());
    b += v;
  };
  u32(3);  // version
  u64(1);  // tensors
  u64(2);  // key-value pairs
  str("general.architecture");
  u32(8);  // GGUF_TYPE_STRING
  str("llama");
  str("llama.block_count");
  u32(4);  // GGUF_TYPE_UINT32
  u32(1);
  str("blk.0.attn_q.weight");
  u32(static_cast<uint32_t>(ne.size()));
  for (uint64_t n : ne) u64(n);
  u32(0);  // GGML_TYPE_F32
  u64(0);  // offset
  b.append((32 - b.size() % 32) % 32, '\0');
  return b;
}

// Found by fuzzing (tests/fuzz/gguf_fuzz.cpp): ggml's reader multiplies the dimensions before it
// checks that the product fits, and a product that wraps to zero skips its check; the element
// count then overflowed here.
TEST(ModelInfo, AShapeWhoseElementCountOverflowsIsRefused) {
  ScratchDir dir;
  const std::string path = dir.file("overflow.gguf");
  write_file(path, gguf_with_shape({uint64_t{1} << 40, uint64_t{1} << 40}));  // 2^80 wraps to 0
  auto r = read_model_info(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("does not fit in 64 bits"), std::string::npos) << r.status().message();
}

TEST(ModelInfo, MissingFileIsNotFound) {
  ScratchDir dir;
  auto r = read_model_info(dir.file("nope.gguf"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::not_found);
  EXPECT_NE(r.status().message().find("nope.gguf"), std::string::npos);
}

}  // namespace
}  // namespace tandem::plan
