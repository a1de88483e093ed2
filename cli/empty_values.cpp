// An option given an empty value ("--tp ''", "--config ''", "-o ''") names nothing: CLI11 would
// convert it to the option's default (0, an empty path), so the command ran as if the option
// were left out. Refused instead, for every option that takes a value, by one check.
#include <string>

#include "cli/commands.hpp"

namespace pipetune::cli {

namespace {

void refuse_empty_values_of(CLI::App& app, const CLI::Validator& non_empty) {
  for (CLI::Option* option : app.get_options([](CLI::Option*) { return true; }))
    if (option->get_type_size_max() > 0) option->check(non_empty);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_empty_values_of(*sub, non_empty);
}

}  // namespace

void refuse_empty_values(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& value) {
        return value.empty() ? std::string("the value is empty (give one, or leave the option out)")
                             : std::string();
      },
      "", "non-empty");
  refuse_empty_values_of(app, non_empty);
}

}  // namespace pipetune::cli
