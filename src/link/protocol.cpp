#include "link/protocol.h"

#include <unistd.h>

#include <cstring>

#include "common/build_info.h"
#include "link/socket.h"

namespace tandem::link {

const char* role_name(Role role) {
  return role == Role::rpc ? "rpc" : role == Role::control ? "control" : role == Role::probe ? "probe" : "?";
}

namespace {

constexpr uint8_t kMagic[4] = {'T', 'N', 'D', 'M'};

class Writer {
 public:
  explicit Writer(MsgType type, size_t body) {
    out_.assign(kMagic, kMagic + 4);
    out_.push_back(static_cast<uint8_t>(type));
    out_.push_back(0);
    u16(static_cast<uint16_t>(body));
  }
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) {
    out_.push_back(static_cast<uint8_t>(v >> 8));
    out_.push_back(static_cast<uint8_t>(v));
  }
  void bytes(const uint8_t* p, size_t n) { out_.insert(out_.end(), p, p + n); }
  void field(const std::string& s, size_t width) {
    const size_t n = std::min(s.size(), width);
    bytes(reinterpret_cast<const uint8_t*>(s.data()), n);
    out_.insert(out_.end(), width - n, 0);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  uint8_t u8() { return b_[pos_++]; }
  uint16_t u16() {
    const uint16_t v = static_cast<uint16_t>(b_[pos_] << 8 | b_[pos_ + 1]);
    pos_ += 2;
    return v;
  }
  void bytes(uint8_t* out, size_t n) {
    std::memcpy(out, b_.data() + pos_, n);
    pos_ += n;
  }
  // A zero-padded text field: printable ASCII/UTF-8 up to the first zero, zeros after it.
  Result<std::string> field(size_t width, const char* what) {
    std::string s;
    size_t i = 0;
    for (; i < width && b_[pos_ + i] != 0; ++i) {
      const uint8_t c = b_[pos_ + i];
      if (c < 0x20 || c == 0x7f) return Status::invalid_argument(std::string(what) + " holds a control character");
      s += static_cast<char>(c);
    }
    for (; i < width; ++i) {
      if (b_[pos_ + i] != 0) return Status::invalid_argument(std::string(what) + " is not zero-padded");
    }
    pos_ += width;
    return s;
  }

 private:
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

Status expect_size(const std::vector<uint8_t>& body, size_t size, const char* what) {
  if (body.size() != size) {
    return Status::invalid_argument(std::string(what) + " of " + std::to_string(body.size()) + " bytes, expected " +
                                    std::to_string(size));
  }
  return Status::ok();
}

std::vector<uint8_t> mac_over(const Secret& secret, const char* label, const std::vector<uint8_t>& a,
                              const std::vector<uint8_t>& b) {
  std::vector<uint8_t> data(label, label + std::strlen(label) + 1);  // the label and its terminating zero
  data.insert(data.end(), a.begin(), a.end());
  data.insert(data.end(), b.begin(), b.end());
  return secret.hmac(data);
}

}  // namespace

std::vector<uint8_t> encode_hello(const Hello& m) {
  Writer w(MsgType::hello, kHelloBody);
  w.u16(m.version);
  w.u8(static_cast<uint8_t>(m.role));
  w.u8(0);
  w.bytes(m.nonce.data(), kNonceSize);
  w.field(m.llama_commit, kCommitField);
  w.field(m.name, kNameField);
  return w.take();
}

std::vector<uint8_t> encode_challenge(const Challenge& m) {
  Writer w(MsgType::challenge, kChallengeBody);
  w.u16(m.version);
  w.u16(0);
  w.bytes(m.nonce.data(), kNonceSize);
  w.field(m.llama_commit, kCommitField);
  w.field(m.name, kNameField);
  std::vector<uint8_t> mac = m.mac;
  mac.resize(kMacSize, 0);
  w.bytes(mac.data(), kMacSize);
  return w.take();
}

std::vector<uint8_t> encode_proof(const std::vector<uint8_t>& mac) {
  Writer w(MsgType::proof, kProofBody);
  std::vector<uint8_t> m = mac;
  m.resize(kMacSize, 0);
  w.bytes(m.data(), kMacSize);
  return w.take();
}

std::vector<uint8_t> encode_verdict(const Verdict& m) {
  const std::string text = m.text.substr(0, kMaxVerdictText);
  Writer w(MsgType::verdict, 4 + text.size());
  w.u8(static_cast<uint8_t>(m.code));
  w.u8(0);
  w.u16(static_cast<uint16_t>(text.size()));
  w.bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  return w.take();
}

Result<FrameHeader> parse_frame_header(const uint8_t (&b)[kFrameHeaderSize]) {
  if (std::memcmp(b, kMagic, 4) != 0) {
    // ggml RPC: command byte (HELLO = 14), then the request size as u64 little-endian (24).
    if (b[0] == 14 && b[1] == 24 && b[2] == 0 && b[3] == 0 && b[4] == 0 && b[5] == 0 && b[6] == 0 && b[7] == 0) {
      return Status::invalid_argument(
          "a raw ggml RPC HELLO, not a tandem link handshake (ggml RPC clients must connect through a tandem "
          "forwarder: `tandem link forward`)");
    }
    char hex[32];
    std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
    return Status::invalid_argument(std::string("not a tandem link handshake: garbage bytes (starts with 0x") + hex +
                                    ")");
  }
  if (b[4] < 1 || b[4] > 4) return Status::invalid_argument("unknown message type " + std::to_string(b[4]));
  if (b[5] != 0) return Status::invalid_argument("non-zero frame flags");
  const uint16_t length = static_cast<uint16_t>(b[6] << 8 | b[7]);
  if (length > kMaxFrameBody)
    return Status::invalid_argument("a frame of " + std::to_string(length) + " bytes (limit 1024)");
  return FrameHeader{static_cast<MsgType>(b[4]), length};
}

Result<Hello> parse_hello(const std::vector<uint8_t>& body) {
  if (body.size() < 2) return Status::invalid_argument("HELLO too short to hold a version");
  Reader r(body);
  Hello m;
  m.version = r.u16();
  if (m.version != kProtocolVersion) return m;  // the caller answers with version_mismatch
  TANDEM_RETURN_IF_ERROR(expect_size(body, kHelloBody, "HELLO"));
  const uint8_t role = r.u8();
  if (role != static_cast<uint8_t>(Role::rpc) && role != static_cast<uint8_t>(Role::control) &&
      role != static_cast<uint8_t>(Role::probe)) {
    return Status::invalid_argument("HELLO names unknown role " + std::to_string(role));
  }
  m.role = static_cast<Role>(role);
  if (r.u8() != 0) return Status::invalid_argument("HELLO: reserved byte not zero");
  r.bytes(m.nonce.data(), kNonceSize);
  auto commit = r.field(kCommitField, "HELLO llama.cpp commit");
  if (!commit.is_ok()) return commit.status();
  auto name = r.field(kNameField, "HELLO name");
  if (!name.is_ok()) return name.status();
  m.llama_commit = commit.value();
  m.name = name.value();
  return m;
}

Result<Challenge> parse_challenge(const std::vector<uint8_t>& body) {
  TANDEM_RETURN_IF_ERROR(expect_size(body, kChallengeBody, "CHALLENGE"));
  Reader r(body);
  Challenge m;
  m.version = r.u16();
  if (r.u16() != 0) return Status::invalid_argument("CHALLENGE: reserved field not zero");
  r.bytes(m.nonce.data(), kNonceSize);
  auto commit = r.field(kCommitField, "CHALLENGE llama.cpp commit");
  if (!commit.is_ok()) return commit.status();
  auto name = r.field(kNameField, "CHALLENGE name");
  if (!name.is_ok()) return name.status();
  m.llama_commit = commit.value();
  m.name = name.value();
  m.mac.resize(kMacSize);
  r.bytes(m.mac.data(), kMacSize);
  return m;
}

Result<std::vector<uint8_t>> parse_proof(const std::vector<uint8_t>& body) {
  TANDEM_RETURN_IF_ERROR(expect_size(body, kProofBody, "PROOF"));
  return body;
}

Result<Verdict> parse_verdict(const std::vector<uint8_t>& body) {
  if (body.size() < 4) return Status::invalid_argument("VERDICT too short");
  Reader r(body);
  Verdict v;
  v.code = static_cast<VerdictCode>(r.u8());
  r.u8();
  const uint16_t len = r.u16();
  if (len > kMaxVerdictText || body.size() != 4u + len) return Status::invalid_argument("VERDICT text length mismatch");
  for (size_t i = 4; i < body.size(); ++i) {
    const char c = static_cast<char>(body[i]);
    v.text += (static_cast<uint8_t>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  return v;
}

std::vector<uint8_t> server_mac(const Secret& secret, const std::vector<uint8_t>& hello_frame,
                                const std::vector<uint8_t>& challenge_frame_without_mac) {
  return mac_over(secret, "tandem-link/1 server", hello_frame, challenge_frame_without_mac);
}

std::vector<uint8_t> client_mac(const Secret& secret, const std::vector<uint8_t>& hello_frame,
                                const std::vector<uint8_t>& challenge_frame) {
  return mac_over(secret, "tandem-link/1 client", hello_frame, challenge_frame);
}

HandshakeOptions default_handshake_options() {
  HandshakeOptions o;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  o.name = host;
  o.llama_commit = TANDEM_LLAMA_COMMIT;
  return o;
}

}  // namespace tandem::link
