#pragma once

// Forward declarations of every message type, so that `type_ids.hpp` can register them without
// pulling in their definitions.

#include <cstdint>
#include <string>
#include <vector>

namespace opforge {

// -- persistence
// -----------------------------------------------------------------------------------

enum class family : uint8_t;
struct write_batch;
struct stored_value;
struct key_value;
struct store_status;

// -- devices
// ---------------------------------------------------------------------------------------

struct device_job;
struct device_job_result;
struct device_manager_status;
struct worker_info;

namespace wire {
struct goodbye;
struct hello;
struct job;
struct result;
struct worker_heartbeat;
} // namespace wire

// -- llm endpoints and summarizer
// ------------------------------------------------------------------
struct chat_message;
struct chat_request;
struct chat_result;
struct token_usage;
struct endpoint_status;
struct endpoint_health;
struct http_exchange;
struct summary_request;
struct summary_result;

// -- sessions and campaigns
// ------------------------------------------------------------------------
struct session_summary;
struct campaign_status;
struct campaign_request;

// -- the library
// -----------------------------------------------------------------------------------
struct kernel_version;
struct revalidation_status;
struct maintenance_status;
struct import_request;
struct import_status;

namespace contract {
struct library_kernel;
struct library_bundle;
struct toolchain_proof;
struct kernel_timing;
struct conformance_report;
} // namespace contract

} // namespace opforge
