#include "engine/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/protocol.h"

namespace tandem::engine {
namespace {

Result<sockaddr_un> address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return Status::invalid_argument("socket path '" + path + "' must be 1 to " +
                                    std::to_string(sizeof addr.sun_path - 1) + " bytes long");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

Result<int> listen_unix(const std::string& path) {
  auto addr = address(path);
  if (!addr.is_ok()) return addr.status();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::internal(std::string("socket: ") + std::strerror(errno));
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr.value()), sizeof(sockaddr_un)) != 0 ||
      ::chmod(path.c_str(), 0600) != 0 || ::listen(fd, 16) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Status::unavailable("socket " + path + ": " + why);
  }
  return fd;
}

Result<int> connect_unix(const std::string& path, int timeout_ms) {
  auto addr = address(path);
  if (!addr.is_ok()) return addr.status();
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::internal(std::string("socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr.value()), sizeof(sockaddr_un)) == 0) return fd;
    const std::string why = std::strerror(errno);
    ::close(fd);
    if (std::chrono::steady_clock::now() >= end)
      return Status::unavailable("engine socket " + path + ": cannot connect: " + why);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool LineReader::next(std::string* line) {
  for (;;) {
    const size_t nl = buffer_.find('\n', scanned_);
    if (nl != std::string::npos) {
      line->assign(buffer_, 0, nl);
      buffer_.erase(0, nl + 1);
      scanned_ = 0;
      return true;
    }
    scanned_ = buffer_.size();
    if (buffer_.size() > kMaxLineBytes) {
      error_ = "a line exceeds " + std::to_string(kMaxLineBytes) + " bytes";
      return false;
    }
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n < 0) error_ = std::strerror(errno);
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace tandem::engine
