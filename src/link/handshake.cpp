// Both sides of the handshake described in protocol.h. Every read and write has the step deadline.
#include <cstring>

#include "link/protocol.h"
#include "link/socket.h"

namespace tandem::link {
namespace {

struct Frame {
  MsgType type;
  std::vector<uint8_t> raw;  // header + body, as received (the MACs cover these bytes)
  std::vector<uint8_t> body;
};

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

// Reads one frame within the step deadline. `what` names the expected message for errors;
// `first` marks the very first read of the connection (its errors read "before the handshake").
Result<Frame> read_frame(int fd, std::chrono::milliseconds step, const char* what, bool first = false) {
  const Deadline deadline = deadline_in(step);
  uint8_t header[kFrameHeaderSize];
  size_t got = 0;
  Io io = read_exact(fd, header, sizeof header, deadline, &got);
  if (io != Io::ok) {
    if (first && got == 0 && io == Io::timed_out) return Status::unavailable("no handshake within " + ms(step));
    if (first && got == 0 && io == Io::closed) return Status::unavailable("closed before the handshake");
    if (got > 0 && first) {
      // Too few bytes for a header: judge them anyway, garbage is garbage.
      uint8_t padded[kFrameHeaderSize] = {};
      std::memcpy(padded, header, got);
      auto h = parse_frame_header(padded);
      if (!h.is_ok()) return h.status();
    }
    return Status::unavailable(std::string(io_name(io)) + " while waiting for " + what +
                               (io == Io::timed_out ? " (" + ms(step) + ")" : ""));
  }
  auto h = parse_frame_header(header);
  if (!h.is_ok()) return h.status();
  Frame f;
  f.type = h->type;
  f.body.resize(h->length);
  io = read_exact(fd, f.body.data(), f.body.size(), deadline);
  if (io != Io::ok) return Status::unavailable(std::string(io_name(io)) + " in the middle of " + what);
  f.raw.assign(header, header + kFrameHeaderSize);
  f.raw.insert(f.raw.end(), f.body.begin(), f.body.end());
  return f;
}

Status send_frame(int fd, const std::vector<uint8_t>& frame, std::chrono::milliseconds step, const char* what) {
  const Io io = write_all(fd, frame.data(), frame.size(), deadline_in(step));
  if (io != Io::ok) return Status::unavailable(std::string(io_name(io)) + " while sending " + what);
  return Status::ok();
}

void send_verdict(int fd, VerdictCode code, const std::string& text, std::chrono::milliseconds step) {
  (void)send_frame(fd, encode_verdict({code, text}), step, "VERDICT");  // best effort: we close anyway
}

std::string short_commit(const std::string& c) { return c.empty() ? "(none)" : c.substr(0, 12); }

Result<Verdict> read_verdict(int fd, std::chrono::milliseconds step) {
  auto f = read_frame(fd, step, "the verdict");
  if (!f.is_ok()) return f.status();
  if (f->type != MsgType::verdict)
    return Status::invalid_argument("expected VERDICT, got message type " + std::to_string(int(f->type)));
  return parse_verdict(f->body);
}

}  // namespace

Result<PeerInfo> client_handshake(int fd, const Secret& secret, Role role, const HandshakeOptions& o,
                                  const std::string& context) {
  auto fail = [&](const Status& s) -> Status { return s.with_context(context + ": handshake failed"); };
  auto reject = [&](const std::string& why) -> Status {
    return Status::invalid_argument(context + ": handshake rejected: " + why);
  };
  Hello hello;
  hello.role = role;
  auto nonce = random_bytes(kNonceSize);
  if (!nonce.is_ok()) return nonce.status();
  std::memcpy(hello.nonce.data(), nonce->data(), kNonceSize);
  hello.llama_commit = o.llama_commit;
  hello.name = o.name;
  const std::vector<uint8_t> hello_frame = encode_hello(hello);
  if (Status s = send_frame(fd, hello_frame, o.step_timeout, "HELLO"); !s.is_ok()) return fail(s);

  auto f = read_frame(fd, o.step_timeout, "the challenge");
  if (!f.is_ok()) return fail(f.status());
  if (f->type == MsgType::verdict) {
    auto v = parse_verdict(f->body);
    if (!v.is_ok()) return fail(v.status());
    return reject(v->text);
  }
  if (f->type != MsgType::challenge) return fail(Status::invalid_argument("expected CHALLENGE"));
  auto ch = parse_challenge(f->body);
  if (!ch.is_ok()) return fail(ch.status());
  std::vector<uint8_t> without_mac(f->raw.begin(), f->raw.end() - kMacSize);
  const bool server_ok = constant_time_equal(ch->mac, server_mac(secret, hello_frame, without_mac));
  // The proof goes out even when the worker's MAC is wrong, so the worker can log the real
  // reason; it is bound to this session's two nonces and is worth nothing elsewhere.
  if (Status s = send_frame(fd, encode_proof(client_mac(secret, hello_frame, f->raw)), o.step_timeout, "PROOF");
      !s.is_ok() && server_ok) {
    return fail(s);
  }
  if (!server_ok) return reject("wrong cluster secret (the worker's proof does not match our secret)");
  auto v = read_verdict(fd, o.step_timeout);
  if (!v.is_ok()) return fail(v.status());
  if (v->code != VerdictCode::ok) return reject(v->text);
  PeerInfo peer;
  peer.name = ch->name;
  peer.llama_commit = ch->llama_commit;
  peer.address = peer_address(fd);
  peer.role = role;
  peer.role_known = true;
  return peer;
}

Result<PeerInfo> server_handshake(int fd, const Secret& secret, const HandshakeOptions& o, const AdmitFn& admit,
                                  PeerInfo* seen) {
  const auto step = o.step_timeout;
  PeerInfo scratch;
  PeerInfo& peer = seen != nullptr ? *seen : scratch;
  peer.address = peer_address(fd);
  auto f = read_frame(fd, step, "HELLO", true);
  if (!f.is_ok()) return f.status();
  if (f->type != MsgType::hello)
    return Status::invalid_argument("expected HELLO, got message type " + std::to_string(int(f->type)));
  auto hello = parse_hello(f->body);
  if (!hello.is_ok()) {
    send_verdict(fd, VerdictCode::bad_request, hello.status().message(), step);
    return hello.status();
  }
  peer.name = hello->name;
  peer.llama_commit = hello->llama_commit;
  peer.role = hello->role;
  peer.role_known = hello->version == kProtocolVersion;
  if (hello->version != kProtocolVersion) {
    const std::string why = "link protocol mismatch: '" + o.name + "' speaks version " +
                            std::to_string(kProtocolVersion) + ", the peer version " + std::to_string(hello->version);
    send_verdict(fd, VerdictCode::version_mismatch, why, step);
    return Status::invalid_argument(why);
  }
  if (hello->llama_commit != o.llama_commit) {
    const std::string why = "llama.cpp mismatch: '" + o.name + "' runs " + short_commit(o.llama_commit) + ", '" +
                            hello->name + "' runs " + short_commit(hello->llama_commit) +
                            "; every node must run the same build";
    send_verdict(fd, VerdictCode::commit_mismatch, why, step);
    return Status::invalid_argument(why);
  }
  Challenge ch;
  auto nonce = random_bytes(kNonceSize);
  if (!nonce.is_ok()) return nonce.status();
  std::memcpy(ch.nonce.data(), nonce->data(), kNonceSize);
  ch.llama_commit = o.llama_commit;
  ch.name = o.name;
  ch.mac.assign(kMacSize, 0);
  std::vector<uint8_t> frame = encode_challenge(ch);
  const std::vector<uint8_t> mac =
      server_mac(secret, f->raw, std::vector<uint8_t>(frame.begin(), frame.end() - kMacSize));
  std::copy(mac.begin(), mac.end(), frame.end() - kMacSize);
  TANDEM_RETURN_IF_ERROR(send_frame(fd, frame, step, "CHALLENGE"));

  auto pf = read_frame(fd, step, "PROOF");
  if (!pf.is_ok()) return pf.status();
  if (pf->type != MsgType::proof)
    return Status::invalid_argument("expected PROOF, got message type " + std::to_string(int(pf->type)));
  auto proof = parse_proof(pf->body);
  if (!proof.is_ok()) return proof.status();
  if (!constant_time_equal(proof.value(), client_mac(secret, f->raw, frame))) {
    send_verdict(fd, VerdictCode::wrong_secret, "wrong cluster secret", step);
    return Status::invalid_argument("wrong cluster secret");
  }
  const Verdict v = admit ? admit(peer) : Verdict{};
  send_verdict(fd, v.code, v.text, step);
  if (v.code != VerdictCode::ok) return Status::unavailable(v.text);
  return peer;
}

}  // namespace tandem::link
