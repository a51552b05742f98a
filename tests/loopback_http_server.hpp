#pragma once

// A hand-rolled HTTP peer on loopback for the LLM endpoint's fault tests: what no real server does
// on purpose (accept and stay silent, or trickle an answer byte by byte).

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace opforge::testing {

// A loopback HTTP server on its own thread: `silent` accepts and never answers; otherwise it
// answers every request with headers at once and `body` one byte per `trickle`, so that the
// answer takes longer than a first-byte timeout after its first byte.
class loopback_server {
public:
  loopback_server(bool silent, std::string body, std::chrono::milliseconds trickle)
      : silent_{silent}, body_{std::move(body)}, trickle_{trickle} {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), size);
    ::listen(fd_, 16);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread{[this] { serve(); }};
  }
  ~loopback_server() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    for (int c : connections_)
      ::close(c);
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }

private:
  void serve() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0)
        return;
      connections_.push_back(c); // held open, silent, until the server stops
      if (silent_)
        continue;
      char buffer[65536];
      std::string request;
      while (request.find("\r\n\r\n") == std::string::npos) {
        auto n = ::recv(c, buffer, sizeof buffer, 0);
        if (n <= 0)
          break;
        request.append(buffer, n);
      }
      auto head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(body_.size()) + "\r\nConnection: close\r\n\r\n";
      ::send(c, head.data(), head.size(), MSG_NOSIGNAL);
      for (char ch : body_) {
        ::send(c, &ch, 1, MSG_NOSIGNAL);
        std::this_thread::sleep_for(trickle_);
      }
    }
  }
  bool silent_;
  std::string body_;
  std::chrono::milliseconds trickle_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> connections_;
  std::thread thread_;
};

} // namespace opforge::testing
