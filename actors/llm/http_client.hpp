#pragma once

// The HTTP side of an llm_endpoint: one plain thread driving a libcurl multi handle, so that no CAF
// scheduler thread ever blocks on the network or on disk. The actor submits transfers; the thread
// hands each finished one to `on_done` (which `anon_send`s it back into the actor system). The
// thread also appends cassette lines, for the same reason.

#include "messages/llm_messages.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <curl/curl.h>

namespace opforge {

struct http_post {
  uint64_t ticket = 0;
  uint32_t attempt = 0;
  std::string url;
  std::vector<std::string> headers; // "Name: value"; may hold the API key, so never logged
  std::string body;
  /// A GET without a body instead (an endpoint's health probe).
  bool get = false;
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds total_timeout{600'000};
  /// When no byte of the response (headers included) has come this long after the start, the
  /// thread hands `on_done` a notice (http_exchange::stalled) and lets the transfer go on: the
  /// caller decides whether silence means a hung server. Zero: no notice.
  std::chrono::milliseconds first_byte_timeout{0};
};

class http_client {
public:
  using completion_handler = std::function<void(http_exchange)>;

  /// Starts the thread. `cassette` is the file `record` appends to (empty: recording is off).
  http_client(completion_handler on_done, std::string cassette);

  /// Aborts every transfer (without calling `on_done`), writes pending cassette lines and joins.
  ~http_client();

  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  /// Starts a POST; `on_done` gets exactly one exchange for it unless it is cancelled first, and
  /// before it at most one stall notice.
  void post(http_post request);

  /// Aborts the transfer of this ticket; `on_done` is not called for it.
  void cancel(uint64_t ticket);

  /// Appends one line to the cassette file.
  void record(std::string line);

  /// Responses larger than this end the transfer with an error instead of exhausting memory.
  static constexpr size_t max_response_bytes = size_t{64} << 20;

private:
  void run();

  completion_handler on_done_;
  std::string cassette_;
  CURLM* multi_;
  std::mutex mutex_;
  std::deque<http_post> posts_;
  std::vector<uint64_t> cancels_;
  std::deque<std::string> records_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace opforge
