// The cluster link protocol, version 1: the handshake that every connection between a head and a
// worker starts with. docs/protocol.md is the prose version of this header.
//
// Every handshake message is a frame: an 8-byte header (magic "TNDM", type u8, flags u8 = 0,
// body length u16 big-endian) and a body whose size is fixed per type (the verdict's text has an
// explicit length). One parse function per message validates it completely; nothing else reads
// wire bytes. The header layout, the first field of HELLO (the version) and the VERDICT message
// are frozen across protocol versions, so that peers of different versions can always tell each
// other what is wrong.
//
//   client                                   server (worker)
//   HELLO      version, role, nonce_c, llama commit, name  ->
//           <- CHALLENGE  version, nonce_s, llama commit, name, mac_s
//   PROOF      mac_c                                        ->
//           <- VERDICT    code, text
//
//   mac_s = HMAC-SHA256(secret, "tandem-link/1 server" 0x00 | HELLO frame | CHALLENGE frame without mac_s)
//   mac_c = HMAC-SHA256(secret, "tandem-link/1 client" 0x00 | HELLO frame | CHALLENGE frame)
//
// After VERDICT ok, an `rpc` connection carries ggml RPC bytes unchanged, a `control`
// connection JSON lines (see control.h). Inside those RPC bytes, the head may send a tandem worker
// of the same build four markers as the data of an ordinary SET_TENSOR (the second half of this
// header): they keep their place among the connection's other commands, and a stock RPC server
// would store them as data, so only a peer that passed this handshake gets one.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "link/secret.h"

namespace tandem::link {

constexpr uint16_t kProtocolVersion = 4;
constexpr size_t kFrameHeaderSize = 8;
constexpr size_t kMaxFrameBody = 1024;
constexpr size_t kNonceSize = 32;
constexpr size_t kMacSize = 32;
constexpr size_t kCommitField = 40;                                                // a git commit in hex
constexpr size_t kNameField = 32;                                                  // a node name, UTF-8, zero-padded
constexpr size_t kHelloBody = 2 + 1 + 1 + kNonceSize + kCommitField + kNameField;  // 108
constexpr size_t kChallengeBody = 2 + 2 + kNonceSize + kCommitField + kNameField + kMacSize;  // 140
constexpr size_t kProofBody = kMacSize;                                                       // 32
constexpr size_t kMaxVerdictText = 1000;

enum class MsgType : uint8_t { hello = 1, challenge = 2, proof = 3, verdict = 4 };
enum class Role : uint8_t { rpc = 1, control = 2, probe = 3 };  // probe: see probe.h
const char* role_name(Role role);

// Frozen across versions (see above): new codes may be added, none renumbered.
enum class VerdictCode : uint8_t {
  ok = 0,
  version_mismatch = 1,
  commit_mismatch = 2,
  wrong_secret = 3,
  busy = 4,         // the worker serves another head
  bad_request = 5,  // a malformed message or an unknown role
  unavailable = 6,  // the worker cannot serve the role now (e.g. its RPC server is down)
};

struct Hello {
  uint16_t version = kProtocolVersion;
  Role role = Role::rpc;
  std::array<uint8_t, kNonceSize> nonce{};
  std::string llama_commit;
  std::string name;
};

struct Challenge {
  uint16_t version = kProtocolVersion;
  std::array<uint8_t, kNonceSize> nonce{};
  std::string llama_commit;
  std::string name;
  std::vector<uint8_t> mac;  // kMacSize bytes
};

struct Verdict {
  VerdictCode code = VerdictCode::ok;
  std::string text;
};

// Encoders: a whole frame (header + body). Strings longer than their field are cut.
std::vector<uint8_t> encode_hello(const Hello& m);
std::vector<uint8_t> encode_challenge(const Challenge& m);  // mac must be kMacSize bytes
std::vector<uint8_t> encode_proof(const std::vector<uint8_t>& mac);
std::vector<uint8_t> encode_verdict(const Verdict& m);

struct FrameHeader {
  MsgType type;
  uint16_t length;
};

// Validates a frame header: magic, flags, a known type and a body no longer than kMaxFrameBody.
// The error says what the bytes look like (e.g. a raw ggml RPC HELLO).
Result<FrameHeader> parse_frame_header(const uint8_t (&bytes)[kFrameHeaderSize]);

// Validation functions, one per message: the exact body size, reserved fields zero, known enums,
// printable strings. The HELLO parser accepts any version (the caller answers a mismatch with a
// verdict) but then reads nothing past the version field.
Result<Hello> parse_hello(const std::vector<uint8_t>& body);
Result<Challenge> parse_challenge(const std::vector<uint8_t>& body);
Result<std::vector<uint8_t>> parse_proof(const std::vector<uint8_t>& body);
Result<Verdict> parse_verdict(const std::vector<uint8_t>& body);

std::vector<uint8_t> server_mac(const Secret& secret, const std::vector<uint8_t>& hello_frame,
                                const std::vector<uint8_t>& challenge_frame_without_mac);
std::vector<uint8_t> client_mac(const Secret& secret, const std::vector<uint8_t>& hello_frame,
                                const std::vector<uint8_t>& challenge_frame);

struct HandshakeOptions {
  std::string name;                              // this node's name, sent to the peer (hostname by default)
  std::string llama_commit;                      // this build's llama.cpp commit
  std::chrono::milliseconds step_timeout{5000};  // deadline of every handshake step
};

// Defaults: the hostname and the compiled-in llama.cpp commit.
HandshakeOptions default_handshake_options();

struct PeerInfo {
  std::string name;
  std::string llama_commit;
  std::string address;  // "ip:port"
  Role role = Role::rpc;
  bool role_known = false;  // false until a valid HELLO was read
};

// Client side on a connected socket. On success the connection is ready for `role`'s traffic.
// Errors are unavailable (network, deadline) or invalid_argument (rejected: wrong secret,
// version or commit mismatch, busy, ...) with the worker's own words where it sent them.
// `context` (e.g. "worker box-b (10.0.0.2:7070)") prefixes every message.
Result<PeerInfo> client_handshake(int fd, const Secret& secret, Role role, const HandshakeOptions& options,
                                  const std::string& context);

// Decides, after the peer has proved that it holds the secret, whether to admit it: returns ok,
// or the verdict to refuse it with (e.g. busy, naming the head already connected).
using AdmitFn = std::function<Verdict(const PeerInfo&)>;

// Server side on an accepted socket. Ok means the verdict ok was sent and the connection is ready.
// An error's message is the outcome for the log line ("wrong cluster secret", "no handshake within
// 5000 ms", ...); the peer got a verdict where that is safe and useful. `seen` (optional)
// receives what the peer claimed in its HELLO (unauthenticated unless the result is ok), for logs.
Result<PeerInfo> server_handshake(int fd, const Secret& secret, const HandshakeOptions& options, const AdmitFn& admit,
                                  PeerInfo* seen = nullptr);

// ---- The data path's markers (docs/protocol.md, "Markers in SET_TENSOR data") ----
//
// Each is the whole data of one SET_TENSOR and starts with 16 bytes of magic; integers are
// little-endian. A parse function returns nullopt for any other bytes, so that ordinary data that
// is not a marker is written as data.

// A weight to load from the worker's cache (common/cached_tensor.h names it by the FNV-1a of its
// bytes): "tandem-cached-v1", hash and size as u64. The worker's splice answers for it and its RPC
// child loads the file (worker/cache_loader.h); engine/cached_upload.h sends it.
constexpr size_t kCachedMarkerSize = 32;
struct CachedMarker {
  uint64_t hash = 0;   // FNV-1a of the whole tensor
  uint64_t bytes = 0;  // its size: the cache file must have exactly this many
};
std::array<uint8_t, kCachedMarkerSize> encode_cached_marker(const CachedMarker& m);
std::optional<CachedMarker> parse_cached_marker(const uint8_t* data, size_t n);

// A step input the worker keeps in, or copies from, one of its reuse slots on the device
// (datapath/input_reuse.h): "tandem-reuse-v1\n", op and slot as u32, bytes and session as u64,
// drop as u32, 4 bytes of zeros.
constexpr uint32_t kReuseSlots = 8;
constexpr size_t kReuseMarkerSize = 48;
enum class ReuseOp : uint32_t { keep = 1, copy = 2 };
struct ReuseMarker {
  ReuseOp op = ReuseOp::keep;
  uint32_t slot = 0;     // < kReuseSlots
  uint64_t bytes = 0;    // what is kept or copied, starting at the write's offset
  uint64_t session = 0;  // the head's connection: a new value starts with empty slots
  uint32_t drop = 0;     // keep only: slots (bit i: slot i) the head no longer counts on, to free
};
std::array<uint8_t, kReuseMarkerSize> encode_reuse_marker(const ReuseMarker& m);
// nullopt also for an unknown op, a slot out of range, zero bytes or a drop of unknown slots.
std::optional<ReuseMarker> parse_reuse_marker(const void* data, size_t n);

// The prompt cache's shares (engine/prompt_cache.h, datapath/kv_shares.h): the part of a saved
// sequence state that lies in a worker's KV cache stays in that worker's memory, under the head's
// key: "tandem-kvshare1\n", op and 4 bytes of zeros as u32, then key, session, stream, offset and
// bytes as u64. `save` copies `bytes` at `offset` of the SET_TENSOR's tensor to position `stream`
// of that tensor's stream in share `key`; `restore` copies them back (anywhere in the tensor);
// `drop` frees the share; `query` makes the next 32-byte GET_TENSOR on the connection answer
// with a KvShareAnswer instead of tensor data; `spill` moves the share to the worker's disk (a
// restore reads it back). A new session drops every share of the last one.
constexpr size_t kKvShareMarkerSize = 64;
enum class KvShareOp : uint32_t { save = 1, restore = 2, drop = 3, query = 4, spill = 5 };
struct KvShareMarker {
  KvShareOp op = KvShareOp::save;
  uint64_t key = 0;
  uint64_t session = 0;
  uint64_t stream = 0;  // save/restore: the position in the tensor's stream of this share
  uint64_t offset = 0;  // save/restore: the region of the tensor
  uint64_t bytes = 0;
};
std::array<uint8_t, kKvShareMarkerSize> encode_kv_share_marker(const KvShareMarker& m);
// nullopt also for an unknown op, or a save or restore of zero bytes.
std::optional<KvShareMarker> parse_kv_share_marker(const void* data, size_t n);

// The worker's answer to a query: "tandem-kvheld-1\n", held as u32 (1: the share exists and every
// save into it was kept), faults as u32 (saves or restores of the share it could not carry out),
// then the share's bytes as u64.
constexpr size_t kKvShareAnswerSize = 32;
struct KvShareAnswer {
  bool held = false;
  uint32_t faults = 0;
  uint64_t bytes = 0;
};
std::array<uint8_t, kKvShareAnswerSize> encode_kv_share_answer(const KvShareAnswer& a);
std::optional<KvShareAnswer> parse_kv_share_answer(const void* data, size_t n);

// A step input sent as runs of equal 32-bit words (a prompt chunk's masks are mostly long runs of
// one value, and grow with the positions in the cache): "tandem-runs-v1\n\0", the expanded size as
// u64, the number of runs as u32, 4 bytes of zeros, then per run its length in words (u32, at
// least 1) and the word (4 bytes as they were). The runs cover exactly the expanded size, a
// multiple of 4. The head's datapath/rpc_writes.h encodes, the worker's datapath/input_writes.h
// expands in place.
constexpr size_t kWordRunsHeader = 32;
// Inputs smaller than this go as they are: little to gain, and a scan on the step's path.
constexpr size_t kWordRunsMinBytes = 64 * 1024;
// `n` bytes at `data` as runs, when that takes at most `n / 8` bytes; nullopt otherwise (a size
// that is not a multiple of 4, too small, or not repetitive enough: the scan stops as soon as the
// runs pass that limit, so incompressible data costs a fraction of a pass).
std::optional<std::vector<uint8_t>> encode_word_runs(const void* data, size_t n);
// The expanded size of the encoding in `data` (`n` bytes), or nullopt when `data` is not one. Checks
// the whole encoding, so that a `decode_word_runs` of it into that many bytes cannot fail.
std::optional<uint64_t> word_runs_size(const void* data, size_t n);
// Expands the encoding into `out`, which holds word_runs_size(data, n) bytes; false when it is not
// a valid encoding of that size.
bool decode_word_runs(const void* data, size_t n, void* out, size_t out_n);

}  // namespace tandem::link
