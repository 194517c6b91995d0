// The weight cache: seeding from the worker's own model makes a load send almost nothing.
#include "worker/cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <regex>

#include "common/cached_tensor.h"
#include "datapath/file_reads.h"
#include "engine/cached_upload.h"
#include "engine/generate.h"
#include "engine/hash_memo.h"
#include "engine/model_loader.h"
#include "link/forwarder.h"
#include "link/protocol.h"
#include "page_cache.h"
#include "plan/model_info.h"
#include "synth/presets.h"
#include "synth/writer.h"
#include "worker_env.h"

namespace tandem::worker {
namespace {

using namespace tandem::testing;

// qwen3moe, 2 layers, hidden 1024, 8 experts of 4096 in Q8_0: each expert tensor is ~17 MiB,
// above ggml's 10 MiB hash threshold; attention and norms (below it) are <1% of a layer.
std::string write_big_model(const ScratchDir& dir, bool wide_attention = false) {
  synth::ModelSpec spec = synth::preset("tiny-qwen3moe").value();
  if (wide_attention) {  // attention Q and O of 2.1 MiB: under ggml's threshold, over tandem's
    spec.n_head = 16;
    spec.head_dim = 128;
    spec.n_rot = 128;
  }
  spec.n_embd = 1024;
  spec.n_ff_exp = 4096;
  spec.n_expert = 8;
  spec.type = 8;  // GGML_TYPE_Q8_0
  const std::string path = dir.file("big.gguf");
  EXPECT_TRUE(synth::write_model(spec, path, {}).is_ok());
  return path;
}

// Bytes of the tensors a worker holding layer 1 and the output head receives.
uint64_t worker_share(const std::string& model) {
  uint64_t bytes = 0;
  const auto info = plan::read_model_info(model);
  EXPECT_TRUE(info.is_ok());
  for (const auto& t : info.value().tensors) {
    if (t.layer == 1 || t.name.rfind("output", 0) == 0) bytes += t.bytes;
  }
  return bytes;
}

// Loads the model with layer 1 and the output head on the worker; returns the link bytes sent.
uint64_t load_through_link(const ScratchDir& dir, const std::string& model, const std::string& cache_dir,
                           const std::string& name) {
  const link::Secret secret = link::load_secret(dir.file("cluster.key")).value();
  WorkerProcess w(dir, name, dir.file("cluster.key"), {"--cache-dir", cache_dir});
  EXPECT_TRUE(w.up()) << w.log();
  link::ForwarderOptions o;
  o.worker = w.ep();
  link::Forwarder f(o, secret);
  EXPECT_TRUE(f.start().is_ok());
  EXPECT_TRUE(f.wait_until_up(link::Millis(10000)));
  engine::LoadOptions lo;
  lo.model = model;
  lo.placement.rpc_servers = {"127.0.0.1:" + std::to_string(f.port())};
  lo.placement.cpu_layers = 1;
  lo.placement.device_layers = {1};
  auto m = engine::load_model(lo);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  // ggml's RPC client sends SET_TENSOR without waiting for an answer, so the load can return while
  // the last tensor is still on its way: count once the counter has settled (bounded wait).
  uint64_t sent = f.stats().bytes_to_worker;
  for (int stable = 0, i = 0; stable < 20 && i < 400; ++i) {  // settled: unchanged for 1 s
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t now = f.stats().bytes_to_worker;
    stable = now == sent ? stable + 1 : 0;
    sent = now;
  }
  return sent;
}

TEST(Seed, ASeededCacheSendsUnderOnePercentOfTheWorkersShare) {
  ScratchDir dir;
  make_secret(dir.file("cluster.key"));
  const std::string model = write_big_model(dir);
  const uint64_t share = worker_share(model);

  const uint64_t unseeded = load_through_link(dir, model, dir.file("cache-a"), "box-a");

  auto seeded_run =
      run_tandem("worker seed -m " + model + " --cache-dir " + dir.file("cache-b") + " --layers 1-1", dir.file(""));
  ASSERT_EQ(seeded_run.exit_code, 0) << seeded_run.err;
  const uint64_t seeded = load_through_link(dir, model, dir.file("cache-b"), "box-b");

  std::printf("worker share %llu bytes; link bytes unseeded %llu (%.2f%%), seeded %llu (%.3f%%)\n",
              static_cast<unsigned long long>(share), static_cast<unsigned long long>(unseeded),
              100.0 * unseeded / share, static_cast<unsigned long long>(seeded), 100.0 * seeded / share);
  EXPECT_GT(unseeded, share * 95 / 100);
  EXPECT_LT(seeded, share / 100);
  // The unseeded load made ggml fill cache-a itself (its last file may still have been in writing
  // when the worker stopped): every file ggml named is one that seeding named the same way.
  auto a = list_cache(dir.file("cache-a"));
  auto b = list_cache(dir.file("cache-b"));
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_FALSE(a->empty());
  for (const auto& e : a.value()) {
    EXPECT_TRUE(std::any_of(b->begin(), b->end(), [&](const CacheEntry& s) { return s.name == e.name; })) << e.name;
  }
}

// What `tandem serve` hands the engine: the worker's cache listing as a file.
std::string listing_file(const ScratchDir& dir, const std::string& cache, const std::string& name) {
  CacheListing listing;
  const auto entries = list_cache(cache);
  for (const auto& e : entries.value()) listing[parse_hash_name(e.name).value()] = e.bytes;
  const std::string path = dir.file(name);
  EXPECT_TRUE(write_cache_listing(path, listing).is_ok());
  return path;
}

engine::GenerateOptions big_options(const std::string& model) {
  engine::GenerateOptions g;
  g.model = model;
  g.prompt = "Two desktop boxes joined by one cable";
  g.n_predict = 8;
  g.n_ctx = 128;
  g.threads = 2;
  g.ignore_eos = true;
  g.placement.cpu_weight_repack = false;  // the RPC server's CPU backend never repacks
  return g;
}

// The sum of the RPC child's "loaded N cached weights" reports, once it reaches 6 or after 10 s.
int reported_cached_loads(const WorkerProcess& w) {
  static const std::regex report("loaded ([0-9]+) cached weights");
  int sum = 0;
  for (int i = 0; i < 200 && sum < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string log = w.log();
    sum = 0;
    for (std::sregex_iterator it(log.begin(), log.end(), report), end; it != end; ++it) sum += std::stoi((*it)[1]);
  }
  return sum;
}

// The engine's cached uploads: the worker's weights go as markers the worker serves from its
// cache, the link carries almost nothing, and the model computes exactly what one process does.
TEST(Seed, ListedWeightsLoadFromTheWorkersCacheAndGiveTheTokensOfOneProcess) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  const std::string model = write_big_model(dir, true);
  const uint64_t share = worker_share(model);
  auto alone = engine::generate(big_options(model));
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();

  ASSERT_TRUE(seed_cache({model, dir.file("cache"), 1, 1}).is_ok());
  WorkerProcess w(dir, "box-m", dir.file("cluster.key"), {"--cache-dir", dir.file("cache")});
  ASSERT_TRUE(w.up()) << w.log();
  auto forwarder = forward_to(w, secret);
  link::Forwarder& f = *forwarder;
  const std::string endpoint = "127.0.0.1:" + std::to_string(f.port());
  engine::GenerateOptions split = big_options(model);
  split.placement.rpc_servers = {endpoint};
  split.placement.cpu_layers = 1;
  split.placement.device_layers = {1};
  split.placement.cache_listings = {{endpoint, listing_file(dir, dir.file("cache"), "listing")}};
  auto through = engine::generate(split);
  ASSERT_TRUE(through.is_ok()) << through.status().to_string() << "\n" << w.log();
  EXPECT_EQ(through->tokens, alone->tokens);
  const uint64_t sent = f.stats().bytes_to_worker;
  std::printf("worker share %llu bytes, link bytes %llu (%.3f%%)\n", static_cast<unsigned long long>(share),
              static_cast<unsigned long long>(sent), 100.0 * sent / share);
  EXPECT_LT(sent, share / 100);
  f.stop();  // ends the session: the worker logs what it served from the cache
  // 3 expert matrices and the output head (ggml would hash those too) and attention Q and O of
  // layer 1, which ggml would send whole.
  EXPECT_TRUE(w.wait_log("6 weights")) << w.log();
  // ... and its RPC child, which loaded them (worker/cache_loader.h), says so when the worker
  // signals a session's end. The short sessions before the load also send that signal, so a
  // report can come in the middle of the load: the reports add up to the 6 weights.
  EXPECT_EQ(reported_cached_loads(w), 6) << w.log();
}

// The head remembers the hashes it computed for a load (engine/hash_memo.h): the next load of the
// same file takes them from the memo, and one whose fingerprints no longer match is hashed again.
TEST(Seed, ASecondLoadTakesTheWeightHashesFromTheMemo) {
  ScratchDir dir;
  ::setenv("XDG_CACHE_HOME", dir.file("xdg").c_str(), 1);
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  const std::string model = write_big_model(dir, true);
  auto alone = engine::generate(big_options(model));
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
  ASSERT_TRUE(seed_cache({model, dir.file("cache"), 1, 1}).is_ok());
  WorkerProcess w(dir, "box-h", dir.file("cluster.key"), {"--cache-dir", dir.file("cache")});
  ASSERT_TRUE(w.up()) << w.log();
  auto forwarder = forward_to(w, secret);
  const std::string endpoint = "127.0.0.1:" + std::to_string(forwarder->port());
  engine::GenerateOptions split = big_options(model);
  split.placement.rpc_servers = {endpoint};
  split.placement.cpu_layers = 1;
  split.placement.device_layers = {1};
  split.placement.cache_listings = {{endpoint, listing_file(dir, dir.file("cache"), "listing")}};
  auto load = [&](const char* what) {
    EXPECT_TRUE(forwarder->wait_until_up(link::Millis(10000))) << what;
    auto r = engine::generate(split);
    EXPECT_TRUE(r.is_ok()) << what << ": " << r.status().to_string() << "\n" << w.log();
    if (r.is_ok()) {
      EXPECT_EQ(r->tokens, alone->tokens) << what;
    }
    return engine::last_cached_upload_stats();
  };

  const auto first = load("first load");
  EXPECT_EQ(first.markers, 6u);
  EXPECT_EQ(first.remembered, 0u);
  const std::string memo_dir = dir.file("xdg") + "/tandem/weight-hashes";
  std::vector<std::string> memos;
  for (const auto& e : std::filesystem::directory_iterator(memo_dir)) memos.push_back(e.path().string());
  ASSERT_EQ(memos.size(), 1u);
  EXPECT_EQ(engine::read_hash_memo(memos[0]).size(), 6u);

  const auto second = load("second load");
  EXPECT_EQ(second.markers, 6u);
  EXPECT_EQ(second.remembered, 6u);

  // Fingerprints that do not match (as if the bytes had changed in place): hashed again.
  engine::HashMemo memo = engine::read_hash_memo(memos[0]);
  for (auto& [key, e] : memo) e.fingerprint ^= 1;
  ASSERT_TRUE(engine::write_hash_memo(memos[0], memo).is_ok());
  const auto third = load("load with stale fingerprints");
  EXPECT_EQ(third.markers, 6u);
  EXPECT_EQ(third.remembered, 0u);
  EXPECT_EQ(engine::read_hash_memo(memos[0]).begin()->second.fingerprint ^ 1, memo.begin()->second.fingerprint);
}

// Without mmap (what libllama does when a device cannot map files, such as GB10's integrated GPU;
// `--no-mmap` anywhere) libllama reads each weight before its tensor set; the engine skips the
// reads of those a worker loads from its cache (engine/cached_upload.h), and keeps the kernel's
// read-ahead from reading them. A seeded load then reads under 1 % of the worker's share from the
// head's disk, and computes what a mapped load does; the worker's cache files leave its page cache
// once loaded (worker/cache_loader.h). In a CUDA build on a GPU machine (the measurement there) the
// head runs layer 0 and the output head on its GPU, the worker layer 1 on the same GPU.
TEST(Seed, WithoutMmapASeededLoadReadsUnderOnePercentOfTheWorkersShareOnTheHead) {
  ScratchDir dir;
  ::setenv("XDG_CACHE_HOME", dir.file("xdg").c_str(), 1);
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  const std::string model = write_big_model(dir, true);
  if (!has_page_cache(model)) GTEST_SKIP() << dir.file("") << " is on tmpfs: nothing is read from a disk";
  const auto local = engine::offload_devices(engine::Placement{});
  ASSERT_TRUE(local.is_ok()) << local.status().to_string();
  const bool gpu = !local->empty();
  const auto info = plan::read_model_info(model);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  uint64_t share = 0;
  size_t cached_weights = 0;  // what the worker loads from its cache: its weights over 1 MiB
  for (const auto& t : info->tensors) {
    if (t.layer != 1 && (gpu || t.name.rfind("output", 0) != 0)) continue;
    share += t.bytes;
    cached_weights += t.bytes > kSeedThreshold ? 1 : 0;
  }
  const uint64_t others = std::filesystem::file_size(model) - share;  // metadata, layer 0, the embedding
  const std::string cache = dir.file("cache");
  ASSERT_TRUE(seed_cache({model, cache, 1, 1}).is_ok());
  const auto entries = list_cache(cache).value();
  for (const auto& e : entries) {
    write_back(cache + "/" + e.name);    // a seeded cache's pages are clean ...
    read_through(cache + "/" + e.name);  // ... and here all in memory
  }
  WorkerProcess w(dir, "box-n", dir.file("cluster.key"), {"--cache-dir", cache});
  ASSERT_TRUE(w.up()) << w.log();
  auto forwarder = forward_to(w, secret);
  const std::string endpoint = "127.0.0.1:" + std::to_string(forwarder->port());
  engine::GenerateOptions split = big_options(model);
  split.placement.rpc_servers = {endpoint};
  split.placement.cpu_layers = gpu ? 0 : 1;
  split.placement.device_layers = gpu ? std::vector<int>{1, 1} : std::vector<int>{1};
  split.placement.cache_listings = {{endpoint, listing_file(dir, cache, "listing")}};

  // Mapped: the tokens to match. It also leaves the weights' hashes remembered, as any earlier load.
  auto mapped = engine::generate(split);
  ASSERT_TRUE(mapped.is_ok()) << mapped.status().to_string() << "\n" << w.log();
  ASSERT_EQ(engine::last_cached_upload_stats().markers, cached_weights);
  // libllama read nothing itself (an integrated GPU, GB10's, would have it read all the same)
  if (!gpu) {
    EXPECT_EQ(engine::last_cached_upload_stats().reads_skipped, 0u);
  }
  // The files the worker loaded left its page cache; the others seeded (the embedding's) stay.
  size_t dropped = 0;
  for (const auto& e : entries) dropped += resident_pages(cache + "/" + e.name) == 0 ? 1 : 0;
  EXPECT_EQ(dropped, cached_weights) << w.log();

  auto head_reads = [&](const char* what, uint64_t* bytes) {
    EXPECT_TRUE(forwarder->wait_until_up(link::Millis(10000))) << what;
    evict(model);
    const uint64_t before = storage_read_bytes();
    auto r = engine::generate(split);
    *bytes = storage_read_bytes() - before;
    EXPECT_TRUE(r.is_ok()) << what << ": " << r.status().to_string() << "\n" << w.log();
    if (r.is_ok()) {
      EXPECT_EQ(r->tokens, mapped->tokens) << what;
    }
    return engine::last_cached_upload_stats();
  };
  split.placement.mmap = false;
  uint64_t seeded = 0, whole = 0;
  const auto st = head_reads("seeded, without mmap", &seeded);
  // What of the worker's share the seeded load left in the head's page cache: what it read.
  std::string share_read;
  for (const auto& t : info->tensors) {
    if (t.layer != 1 && (gpu || t.name.rfind("output", 0) != 0)) continue;
    const uint64_t in = resident_bytes(model, t.file_offset, t.bytes);
    if (in > 0) share_read += "\n  " + t.name + ": " + std::to_string(in) + " of " + std::to_string(t.bytes) + " bytes";
  }
  EXPECT_EQ(st.markers, cached_weights);
  EXPECT_EQ(st.reads_skipped, cached_weights);
  EXPECT_EQ(st.remembered, cached_weights) << "every hash from the memo the mapped load left";
  EXPECT_EQ(st.reads_completed, 0u);
  EXPECT_EQ(st.bytes_not_read, st.marker_bytes);
  // Listed for another worker: the reads are skipped, then made when the tensor sets show that
  // this worker does not hold them; they travel whole, and compute the same.
  uint64_t elsewhere = 0;
  split.placement.cache_listings = {{"127.0.0.1:1", listing_file(dir, cache, "listing")}};
  const auto other = head_reads("listed for another worker, without mmap", &elsewhere);
  EXPECT_EQ(other.markers, 0u);
  EXPECT_EQ(other.reads_skipped, cached_weights);
  EXPECT_EQ(other.reads_completed, cached_weights);
  EXPECT_EQ(other.bytes_not_read, 0u);
  // The same load with no listing: libllama reads the worker's share too (as it did seeded, before
  // the engine skipped those reads).
  split.placement.cache_listings.clear();
  head_reads("unlisted, without mmap", &whole);
  std::printf(
      "%s: worker share %llu bytes, the rest of the file %llu; head read without mmap: %llu seeded (%.3f%% of the "
      "share beyond the rest), %llu unlisted; of the share, the seeded load read:%s\n",
      gpu ? local->front().c_str() : "CPU", static_cast<unsigned long long>(share),
      static_cast<unsigned long long>(others), static_cast<unsigned long long>(seeded),
      100.0 * (static_cast<double>(seeded) - static_cast<double>(others)) / static_cast<double>(share),
      static_cast<unsigned long long>(whole), share_read.empty() ? " nothing" : share_read.c_str());
  EXPECT_LE(seeded, others + share / 100)
      << "the worker's share in the head's page cache after the seeded load:" << share_read;
  EXPECT_GE(whole, others + share * 9 / 10);
}

// A GPU head without mmap (GB10's integrated GPU cannot map files) reads the weights its GPU holds
// through libllama's staging buffers, 1 MiB at a time, as this test does through the same fread.
// The kernel ramps its read-ahead up on such a stream and, once started, carries it on through its
// own marks in random mode too: on an H100 it read 10.6 % of the worker's share. The reads the
// hook makes stop where a weight it may skip begins, and give the file's bytes.
TEST(Seed, TheHeadsOwnWeightsReadInStagingPiecesLeaveTheWorkersShareUnread) {
  ScratchDir dir;
  const std::string model = write_big_model(dir, true);
  if (!has_page_cache(model)) GTEST_SKIP() << dir.file("") << " is on tmpfs: nothing is read from a disk";
  ASSERT_TRUE(datapath::file_read_interposed());
  const auto info = plan::read_model_info(model);
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  engine::CachedUploadPlan plan;
  plan.model = model;
  plan.first_layer = 1;
  plan.end_layer = 2;
  plan.hash_memo_dir = dir.file("memo");
  plan.file_read = true;
  std::vector<const plan::TensorInfo*> share, own;
  for (const auto& t : info->tensors) (t.layer == 1 ? share : own).push_back(&t);
  std::stable_sort(own.begin(), own.end(), [](const auto* a, const auto* b) { return a->bytes > b->bytes; });
  FILE* stream = std::fopen(model.c_str(), "rb");
  ASSERT_NE(stream, nullptr);
  std::vector<uint8_t> piece(1 << 20), expected(1 << 20);
  // Reads [offset, offset + bytes) as libllama's staged upload does, and checks every piece.
  auto staged_read = [&](uint64_t offset, uint64_t bytes) {
    ASSERT_EQ(::fseeko(stream, static_cast<off_t>(offset), SEEK_SET), 0);
    for (uint64_t done = 0; done < bytes;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(piece.size(), bytes - done));
      ASSERT_EQ(std::fread(piece.data(), n, 1, stream), 1u) << offset + done;
      ASSERT_EQ(::pread(::fileno(stream), expected.data(), n, static_cast<off_t>(offset + done)),
                static_cast<ssize_t>(n));
      ASSERT_EQ(std::memcmp(piece.data(), expected.data(), n), 0) << "bytes at " << offset + done;
      done += n;
    }
  };
  // A first load computes the share's hashes and remembers them, as any earlier start does: its
  // reads of the share's weights, whole as libllama's for a worker's buffer, wait for them.
  ASSERT_TRUE(engine::start_cached_uploads(plan).is_ok());
  size_t jobs = 0;
  for (const auto* t : share) {
    if (t->bytes <= kSeedThreshold) continue;
    ++jobs;
    std::vector<uint8_t> whole(t->bytes);
    ASSERT_EQ(::fseeko(stream, static_cast<off_t>(t->file_offset), SEEK_SET), 0);
    ASSERT_EQ(std::fread(whole.data(), whole.size(), 1, stream), 1u) << t->name;
  }
  engine::finish_cached_uploads();
  ASSERT_GT(jobs, 0u);

  evict(model);
  ASSERT_TRUE(engine::start_cached_uploads(plan).is_ok());
  for (const auto* t : own) staged_read(t->file_offset, t->bytes);
  const engine::CachedUploadStats st = engine::finish_cached_uploads();
  std::fclose(stream);
  EXPECT_EQ(st.remembered, jobs) << "the hashes came from the memo: fingerprints alone read";
  uint64_t share_bytes = 0, share_read = 0;
  std::string listed;
  for (const auto* t : share) {
    share_bytes += t->bytes;
    const uint64_t in = resident_bytes(model, t->file_offset, t->bytes);
    share_read += in;
    if (in > 0) listed += "\n  " + t->name + ": " + std::to_string(in) + " of " + std::to_string(t->bytes) + " bytes";
  }
  std::printf("staged reads of the head's own weights: %llu of the worker's %llu bytes in the page cache%s\n",
              static_cast<unsigned long long>(share_read), static_cast<unsigned long long>(share_bytes),
              listed.c_str());
  EXPECT_LE(share_read, share_bytes / 100) << "the worker's share in the page cache:" << listed;
}

// A listing that no longer matches the cache (entries removed after the head read it) fails the
// engine's load with the worker's reason; the worker stays up and serves the next head.
TEST(Seed, AListedWeightMissingFromTheCacheFailsTheLoadNotTheWorker) {
  ScratchDir dir;
  const link::Secret secret = make_secret(dir.file("cluster.key"));
  const std::string model = write_big_model(dir);
  ASSERT_TRUE(seed_cache({model, dir.file("cache"), 1, 1}).is_ok());
  const std::string listing = listing_file(dir, dir.file("cache"), "listing");
  const auto entries = list_cache(dir.file("cache"));
  for (const auto& e : entries.value()) std::filesystem::remove(dir.file("cache") + "/" + e.name);
  WorkerProcess w(dir, "box-g", dir.file("cluster.key"), {"--cache-dir", dir.file("cache")});
  ASSERT_TRUE(w.up()) << w.log();
  auto forwarder = forward_to(w, secret);
  link::Forwarder& f = *forwarder;
  const std::string endpoint = "127.0.0.1:" + std::to_string(f.port());
  // ggml's RPC client aborts its process when the worker cuts the session: run the engine apart.
  auto r = run_tandem("engine -m " + model + " --prompt hi -n 2 --no-cpu-repack --rpc " + endpoint +
                          " --cpu-layers 1 --layer-split 1 --worker-cache " + endpoint + "=" + listing,
                      dir.file(""));
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(w.wait_log("not in " + dir.file("cache"))) << w.log();
  EXPECT_TRUE(f.wait_until_up(link::Millis(10000)));
  auto again = engine::generate([&] {
    auto g = big_options(model);
    g.n_predict = 2;
    g.placement.rpc_servers = {endpoint};
    g.placement.cpu_layers = 1;
    g.placement.device_layers = {1};
    return g;
  }());
  EXPECT_TRUE(again.is_ok()) << again.status().to_string() << "\n" << w.log();
}

TEST(Seed, CacheListingsRoundTrip) {
  ScratchDir dir;
  CacheListing l{{0x0123456789abcdefULL, 42}, {7, 11ull << 30}};
  ASSERT_TRUE(write_cache_listing(dir.file("l"), l).is_ok());
  auto back = read_cache_listing(dir.file("l"));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back.value(), l);
  write_file(dir.file("bad"), "0123 12\n");
  EXPECT_FALSE(read_cache_listing(dir.file("bad")).is_ok());
}

TEST(Seed, PruneKeepsOnlyTheGivenModelsEntries) {
  ScratchDir dir;
  const std::string model = write_big_model(dir);
  const std::string cache = dir.file("cache");
  ASSERT_TRUE(seed_cache({model, cache, -1, -1}).is_ok());
  const size_t entries = list_cache(cache)->size();
  EXPECT_GT(entries, 3u);
  write_file(cache + "/00000000deadbeef", "stale");
  auto kept = prune_cache(cache, {model});
  ASSERT_TRUE(kept.is_ok());
  EXPECT_EQ(kept->entries, 1u);
  EXPECT_EQ(list_cache(cache)->size(), entries);
}

TEST(Seed, AFullDiskNamesTheFileAndTheReasonAndLeavesNoPart) {
  ScratchDir dir;
  const std::string model = write_big_model(dir);
  ASSERT_TRUE(seed_cache({model, dir.file("first"), -1, -1}).is_ok());
  const auto names = list_cache(dir.file("first"));
  ASSERT_TRUE(names.is_ok());
  ASSERT_FALSE(names->empty());
  // Every weight's partial file is /dev/full: the first write fails as on a disk that filled up.
  const std::string cache = dir.file("full");
  std::filesystem::create_directories(cache);
  for (const auto& e : names.value()) std::filesystem::create_symlink("/dev/full", cache + "/" + e.name + ".part");
  auto r = seed_cache({model, cache, -1, -1});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find(".part: No space left on device"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(cache), std::string::npos) << r.status().message();
  EXPECT_EQ(list_cache(cache)->size(), 0u);
}

TEST(Seed, TheCacheLimitEvictsLeastRecentlyUsedFirst) {
  ScratchDir dir;
  const std::string cache = dir.file("cache");
  std::filesystem::create_directories(cache);
  const char* names[] = {"000000000000000a", "000000000000000b", "000000000000000c"};
  for (int i = 0; i < 3; ++i) {
    const std::string p = cache + "/" + names[i];
    write_file(p, std::string(1000, 'x'));
    utimbuf t{1000000 + i * 1000, 1000000 + i * 1000};  // a is the oldest
    ::utime(p.c_str(), &t);
  }
  auto removed = enforce_cache_limit(cache, 2500);
  ASSERT_TRUE(removed.is_ok());
  EXPECT_EQ(removed.value(), 1000u);
  auto left = list_cache(cache);
  ASSERT_EQ(left->size(), 2u);
  EXPECT_EQ(left.value()[0].name, "000000000000000b");
}

TEST(Seed, HashIsGgmlsFnv1a) {
  EXPECT_EQ(fnv1a("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a("a", 1), 0xaf63dc4c8601ec8cULL);
  const uint64_t whole = fnv1a("hello world", 11);
  EXPECT_EQ(fnv1a(" world", 6, fnv1a("hello", 5)), whole);
}

}  // namespace
}  // namespace tandem::worker
