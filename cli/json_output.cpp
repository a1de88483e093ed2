#include "cli/json_output.hpp"

#include <iostream>

namespace pipetune::cli {

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_json_value(const nlohmann::json& j) {
  std::cout << json_text(j) << "\n";
}

}  // namespace pipetune::cli
