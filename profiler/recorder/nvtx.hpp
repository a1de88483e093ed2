// Thin NVTX wrapper: ranges in a named domain when the NVTX v3 headers were found at configure
// time (PIPETUNE_HAVE_NVTX=1, set by profiler/CMakeLists.txt and passed on to every target that
// links pipetune_profiler), otherwise empty inline functions the compiler removes. NVTX v3 is
// header-only: with no tool attached (Nsight Systems sets NVTX_INJECTION64_PATH) each call is a
// null-pointer check.
#pragma once

#include <cstdint>

#if defined(PIPETUNE_HAVE_NVTX) && PIPETUNE_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace pipetune::profiler::nvtx {

// An opaque domain handle (nvtxDomainHandle_t), so headers that store one need no NVTX include.
using Domain = void*;

#if defined(PIPETUNE_HAVE_NVTX) && PIPETUNE_HAVE_NVTX

inline constexpr bool kCompiledIn = true;

// Creating a domain twice with one name is allowed; domains are never destroyed (NVTX keeps
// them for the life of the process, and another recorder may still use the same handle).
inline Domain create_domain(const char* name) {
  return static_cast<Domain>(nvtxDomainCreateA(name));
}

inline void name_category(Domain domain, std::uint32_t category, const char* name) {
  nvtxDomainNameCategoryA(static_cast<nvtxDomainHandle_t>(domain), category, name);
}

// Pushes a thread range; message is copied by the tool during the call.
inline void push(Domain domain, const char* message, std::uint32_t category, std::uint32_t argb) {
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.category = category;
  attributes.colorType = NVTX_COLOR_ARGB;
  attributes.color = argb;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = message;
  nvtxDomainRangePushEx(static_cast<nvtxDomainHandle_t>(domain), &attributes);
}

inline void pop(Domain domain) {
  nvtxDomainRangePop(static_cast<nvtxDomainHandle_t>(domain));
}

#else

inline constexpr bool kCompiledIn = false;

inline Domain create_domain(const char*) {
  return nullptr;
}
inline void name_category(Domain, std::uint32_t, const char*) {}
inline void push(Domain, const char*, std::uint32_t, std::uint32_t) {}
inline void pop(Domain) {}

#endif

}  // namespace pipetune::profiler::nvtx
