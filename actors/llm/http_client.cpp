#include "actors/llm/http_client.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <memory>
#include <mutex>

#include <spdlog/spdlog.h>

namespace opforge {

namespace {

// One transfer in the multi handle. Owns everything libcurl points into.
struct transfer {
  http_post post;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string response;
  std::string retry_after;
  bool oversized = false;
  bool answered = false;      // a byte of the response came
  bool stall_noticed = false; // the stall notice went out

  char error[CURL_ERROR_SIZE] = {};
  std::chrono::steady_clock::time_point started;

  ~transfer() {
    curl_slist_free_all(headers);
    curl_easy_cleanup(easy);
  }
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto& t = *static_cast<transfer*>(user);
  t.answered = true;
  auto bytes = size * count;
  if (t.response.size() + bytes > http_client::max_response_bytes) {
    t.oversized = true;
    return 0; // makes curl fail the transfer with CURLE_WRITE_ERROR
  }
  t.response.append(data, bytes);
  return bytes;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto& t = *static_cast<transfer*>(user);
  t.answered = true;
  std::string_view line{data, size * count};
  constexpr std::string_view name = "retry-after:";
  if (line.rfind("HTTP/", 0) == 0) // a new response (after 100 Continue): forget the last one's
    t.retry_after.clear();
  if (line.size() > name.size() &&
      std::equal(name.begin(), name.end(), line.begin(),
                 [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
    auto value = line.substr(name.size());
    auto first = value.find_first_not_of(" \t");
    auto last = value.find_last_not_of(" \t\r\n");
    if (first != std::string_view::npos)
      t.retry_after = std::string{value.substr(first, last - first + 1)};
  }
  return size * count;
}

std::unique_ptr<transfer> make_transfer(http_post post) {
  auto t = std::make_unique<transfer>();
  t->post = std::move(post);
  t->easy = curl_easy_init();
  for (const auto& header : t->post.headers)
    t->headers = curl_slist_append(t->headers, header.c_str());
  t->headers = curl_slist_append(t->headers, "Content-Type: application/json");
  t->headers = curl_slist_append(t->headers, "Expect:"); // no 100-continue round trip
  auto* e = t->easy;
  curl_easy_setopt(e, CURLOPT_URL, t->post.url.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
  if (t->post.get) {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->post.body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t->post.body.size()));
  }
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(t->post.connect_timeout.count()));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(t->post.total_timeout.count()));
  t->started = std::chrono::steady_clock::now();
  return t;
}

http_exchange finish(transfer& t, CURLcode code) {
  http_exchange x;
  x.ticket = t.post.ticket;
  x.attempt = t.post.attempt;
  x.elapsed = std::chrono::steady_clock::now() - t.started;
  if (code == CURLE_OK) {
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &x.status);
    x.body = std::move(t.response);
    x.retry_after = std::move(t.retry_after);
  } else if (t.oversized) {
    x.transport_error =
        "response larger than " + std::to_string(http_client::max_response_bytes >> 20) + " MiB";
  } else {
    x.transport_error = curl_easy_strerror(code);
    if (t.error[0] != '\0')
      x.transport_error += std::string{" ("} + t.error + ")";
  }
  return x;
}

// Notices every transfer silent past its first-byte timeout; how long until the next one would be.
std::chrono::milliseconds notice_stalls(const std::vector<std::unique_ptr<transfer>>& active,
                                        const http_client::completion_handler& on_done) {
  using namespace std::chrono_literals;
  auto now = std::chrono::steady_clock::now();
  std::chrono::milliseconds next = 1000ms;
  for (const auto& t : active) {
    if (t->answered || t->stall_noticed || t->post.first_byte_timeout <= 0ms)
      continue;
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(t->started + t->post.first_byte_timeout - now);
    if (left > 0ms) {
      next = std::min(next, left);
      continue;
    }
    t->stall_noticed = true;
    http_exchange notice;
    notice.ticket = t->post.ticket;
    notice.attempt = t->post.attempt;
    notice.stalled = true;
    notice.elapsed = now - t->started;
    on_done(std::move(notice));
  }
  return next;
}

} // namespace

http_client::http_client(completion_handler on_done, std::string cassette)
    : on_done_{std::move(on_done)}, cassette_{std::move(cassette)} {
  static std::once_flag global_init;
  std::call_once(global_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  multi_ = curl_multi_init();
  thread_ = std::thread{[this] { run(); }};
}

http_client::~http_client() {
  {
    std::lock_guard guard{mutex_};
    stopping_ = true;
  }
  curl_multi_wakeup(multi_);
  thread_.join();
  curl_multi_cleanup(multi_);
}

void http_client::post(http_post request) {
  {
    std::lock_guard guard{mutex_};
    posts_.push_back(std::move(request));
  }
  curl_multi_wakeup(multi_);
}

void http_client::cancel(uint64_t ticket) {
  {
    std::lock_guard guard{mutex_};
    cancels_.push_back(ticket);
  }
  curl_multi_wakeup(multi_);
}

void http_client::record(std::string line) {
  {
    std::lock_guard guard{mutex_};
    records_.push_back(std::move(line));
  }
  curl_multi_wakeup(multi_);
}

void http_client::run() {
  std::vector<std::unique_ptr<transfer>> active;
  std::ofstream cassette_file;
  auto remove = [&](transfer* t) {
    curl_multi_remove_handle(multi_, t->easy);
    active.erase(std::find_if(active.begin(), active.end(),
                              [t](const auto& candidate) { return candidate.get() == t; }));
  };
  for (;;) {
    std::deque<http_post> posts;
    std::vector<uint64_t> cancels;
    std::deque<std::string> records;
    bool stopping;
    {
      std::lock_guard guard{mutex_};
      posts.swap(posts_);
      cancels.swap(cancels_);
      records.swap(records_);
      stopping = stopping_;
    }
    if (!records.empty()) {
      if (!cassette_file.is_open())
        cassette_file.open(cassette_, std::ios::app | std::ios::binary);
      for (const auto& line : records)
        cassette_file << line << '\n';
      cassette_file.flush();
      if (!cassette_file)
        spdlog::error("llm: cannot append to cassette {}", cassette_);
    }
    if (stopping)
      break;
    for (auto id : cancels) {
      std::vector<transfer*> doomed;
      for (const auto& t : active)
        if (t->post.ticket == id)
          doomed.push_back(t.get());
      for (auto* t : doomed)
        remove(t);
    }
    for (auto& post : posts) {
      auto t = make_transfer(std::move(post));
      curl_multi_add_handle(multi_, t->easy);
      active.push_back(std::move(t));
    }
    int running = 0;
    curl_multi_perform(multi_, &running);
    int queued = 0;
    while (auto* msg = curl_multi_info_read(multi_, &queued)) {
      if (msg->msg != CURLMSG_DONE)
        continue;
      transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
      auto exchange = finish(*t, msg->data.result);
      remove(t);
      on_done_(std::move(exchange));
    }
    auto wait = notice_stalls(active, on_done_);
    curl_multi_poll(multi_, nullptr, 0, static_cast<int>(wait.count()), nullptr);
  }
  for (const auto& t : active)
    curl_multi_remove_handle(multi_, t->easy);
}

} // namespace opforge
