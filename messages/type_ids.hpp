#pragma once

// The one CAF type-id block of opforge: every atom and every message type that crosses an actor
// boundary is registered here, grouped by the part of the daemon that owns it. Register the block
// with `cfg.add_message_types<caf::id_block::opforge>()` (`messages/system_config.hpp` does, for
// every process).

#include "messages/fwd.hpp"

#include <caf/type_id.hpp>

CAF_BEGIN_TYPE_ID_BLOCK(opforge, caf::first_custom_type_id)

// -- common atoms --------------------------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, status, "status")
CAF_ADD_ATOM(opforge, opforge::atom, shutdown, "shutdown")
CAF_ADD_ATOM(opforge, opforge::atom, ok, "ok")
CAF_ADD_ATOM(opforge, opforge::atom, cancel, "cancel")

// -- persistence ---------------------------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, write, "write")
CAF_ADD_ATOM(opforge, opforge::atom, get, "get")
CAF_ADD_ATOM(opforge, opforge::atom, scan, "scan")
CAF_ADD_ATOM(opforge, opforge::atom, io_done, "io_done")
CAF_ADD_TYPE_ID(opforge, (opforge::family))
CAF_ADD_TYPE_ID(opforge, (opforge::write_batch))
CAF_ADD_TYPE_ID(opforge, (opforge::stored_value))
CAF_ADD_TYPE_ID(opforge, (opforge::store_status))
CAF_ADD_TYPE_ID(opforge, (std::vector<opforge::key_value>))

// -- devices -------------------------------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, submit, "submit")
CAF_ADD_ATOM(opforge, opforge::atom, workers, "workers")
CAF_ADD_ATOM(opforge, opforge::atom, heartbeat, "heartbeat")
CAF_ADD_ATOM(opforge, opforge::atom, dispatch, "dispatch")
CAF_ADD_ATOM(opforge, opforge::atom, tick, "tick")
CAF_ADD_ATOM(opforge, opforge::atom, deadline, "deadline")
CAF_ADD_ATOM(opforge, opforge::atom, disconnected, "disconnect")
CAF_ADD_TYPE_ID(opforge, (opforge::device_job))
CAF_ADD_TYPE_ID(opforge, (opforge::device_job_result))
CAF_ADD_TYPE_ID(opforge, (opforge::device_manager_status))
CAF_ADD_TYPE_ID(opforge, (opforge::worker_info))
CAF_ADD_TYPE_ID(opforge, (std::vector<opforge::worker_info>))
CAF_ADD_TYPE_ID(opforge, (opforge::wire::goodbye))
CAF_ADD_TYPE_ID(opforge, (opforge::wire::hello))
CAF_ADD_TYPE_ID(opforge, (opforge::wire::job))
CAF_ADD_TYPE_ID(opforge, (opforge::wire::result))
CAF_ADD_TYPE_ID(opforge, (opforge::wire::worker_heartbeat))

// -- llm endpoints and summarizer ----------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, complete, "complete")
CAF_ADD_ATOM(opforge, opforge::atom, http_done, "http_done")
CAF_ADD_ATOM(opforge, opforge::atom, retry, "retry")
CAF_ADD_ATOM(opforge, opforge::atom, wakeup, "wakeup")
CAF_ADD_ATOM(opforge, opforge::atom, summarize, "summarize")
CAF_ADD_ATOM(opforge, opforge::atom, health, "health")
CAF_ADD_ATOM(opforge, opforge::atom, probe, "probe")
CAF_ADD_TYPE_ID(opforge, (opforge::chat_message))
CAF_ADD_TYPE_ID(opforge, (opforge::chat_request))
CAF_ADD_TYPE_ID(opforge, (opforge::chat_result))
CAF_ADD_TYPE_ID(opforge, (opforge::token_usage))
CAF_ADD_TYPE_ID(opforge, (opforge::endpoint_status))
CAF_ADD_TYPE_ID(opforge, (opforge::endpoint_health))
CAF_ADD_TYPE_ID(opforge, (opforge::http_exchange))
CAF_ADD_TYPE_ID(opforge, (opforge::summary_request))
CAF_ADD_TYPE_ID(opforge, (opforge::summary_result))

// -- sessions and campaigns ----------------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, run, "run")
CAF_ADD_ATOM(opforge, opforge::atom, progress, "progress")
CAF_ADD_ATOM(opforge, opforge::atom, list, "list")
CAF_ADD_ATOM(opforge, opforge::atom, failover, "failover")
CAF_ADD_TYPE_ID(opforge, (opforge::session_summary))
CAF_ADD_TYPE_ID(opforge, (opforge::campaign_status))
CAF_ADD_TYPE_ID(opforge, (std::vector<opforge::campaign_status>))
CAF_ADD_TYPE_ID(opforge, (opforge::campaign_request))

// -- the library ---------------------------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, add, "add")
CAF_ADD_ATOM(opforge, opforge::atom, validate, "validate")
CAF_ADD_ATOM(opforge, opforge::atom, bundle, "bundle")
CAF_ADD_ATOM(opforge, opforge::atom, accepted, "accepted")
CAF_ADD_ATOM(opforge, opforge::atom, timed, "timed")
CAF_ADD_ATOM(opforge, opforge::atom, conformance, "conformanc")
CAF_ADD_TYPE_ID(opforge, (opforge::kernel_version))
CAF_ADD_TYPE_ID(opforge, (std::vector<opforge::kernel_version>))
CAF_ADD_TYPE_ID(opforge, (opforge::contract::library_kernel))
CAF_ADD_TYPE_ID(opforge, (opforge::contract::library_bundle))
CAF_ADD_TYPE_ID(opforge, (opforge::contract::toolchain_proof))
CAF_ADD_TYPE_ID(opforge, (std::vector<opforge::contract::kernel_timing>))
CAF_ADD_TYPE_ID(opforge, (opforge::contract::conformance_report))
CAF_ADD_TYPE_ID(opforge, (std::vector<opforge::contract::conformance_report>))

// -- maintenance ---------------------------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, revalidate, "revalidate")
CAF_ADD_TYPE_ID(opforge, (opforge::revalidation_status))
CAF_ADD_TYPE_ID(opforge, (opforge::maintenance_status))

// -- imports -------------------------------------------------------------------------------------
CAF_ADD_ATOM(opforge, opforge::atom, onboard, "onboard")
CAF_ADD_TYPE_ID(opforge, (opforge::import_request))
CAF_ADD_TYPE_ID(opforge, (opforge::import_status))
CAF_ADD_TYPE_ID(opforge, (std::vector<opforge::import_status>))

CAF_END_TYPE_ID_BLOCK(opforge)
