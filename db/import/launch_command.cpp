#include "db/import/launch_command.hpp"

#include <charconv>
#include <initializer_list>
#include <string_view>

namespace pipetune::db {

namespace {

std::string_view base_name(std::string_view path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::optional<std::int32_t> positive(std::string_view text) {
  std::int32_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > (1 << 24))
    return std::nullopt;
  return v;
}

// The value of option `name` at args[i]: "--name=V" or "--name V" (advancing i).
std::optional<std::string_view> option(const std::vector<std::string>& args, std::size_t& i,
                                       std::string_view name) {
  std::string_view a = args[i];
  if (a.substr(0, name.size()) != name) return std::nullopt;
  if (a.size() == name.size()) {
    if (i + 1 >= args.size()) return std::nullopt;
    return std::string_view(args[++i]);
  }
  if (a[name.size()] == '=') return a.substr(name.size() + 1);
  return std::nullopt;
}

// Tries each name at args[i]; on a match returns its value, i at the last argument used.
std::optional<std::string_view> any_option(const std::vector<std::string>& args, std::size_t& i,
                                           std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    std::size_t j = i;
    if (auto v = option(args, j, name)) {
      i = j;
      return v;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<LaunchCommand> parse_launch_command(const std::string& command,
                                                  const std::vector<std::string>& arguments) {
  LaunchCommand out;
  std::size_t first = 0;  // where the launcher's own options start
  const std::string_view cmd = base_name(command);
  if (cmd == "torchrun") {
    out.launcher = "torchrun";
  } else if (cmd.substr(0, 6) == "python") {
    // python -m torch.distributed.run / torch.distributed.launch
    if (arguments.size() < 2 || arguments[0] != "-m" ||
        (arguments[1] != "torch.distributed.run" && arguments[1] != "torch.distributed.launch"))
      return std::nullopt;
    out.launcher = "torchrun";
    first = 2;
  } else if (cmd == "mpirun" || cmd == "mpiexec" || cmd == "srun") {
    out.launcher = std::string(cmd == "srun" ? "srun" : "mpirun");
  } else {
    return std::nullopt;
  }
  out.text = command;
  for (const std::string& a : arguments) out.text += " " + a;

  for (std::size_t i = first; i < arguments.size(); ++i) {
    const std::string& a = arguments[i];
    if (out.launcher == "torchrun") {
      // torchrun's options end at the training script (or -m module): the rest are the
      // script's. Other options' values (--master_port 29506) are skipped over.
      if (a == "-m" || (a.size() > 3 && a.substr(a.size() - 3) == ".py")) break;
      if (auto v = any_option(arguments, i, {"--nproc_per_node", "--nproc-per-node"}))
        out.processes_per_node = positive(*v);
      else if (auto v2 = any_option(arguments, i, {"--nnodes"}))
        out.nodes = positive(*v2);  // "1:4" (elastic) is no fixed count: left unknown
      else if (auto v3 = any_option(arguments, i, {"--node_rank", "--node-rank"}))
        out.node_rank = positive(*v3);
    } else if (auto v = any_option(arguments, i, {"-np", "-n", "--np", "--ntasks"})) {
      out.world_size = positive(*v);  // the first one: mpirun's (the program's come later)
      break;
    }
  }
  if (out.launcher == "torchrun" && out.processes_per_node)
    out.world_size = out.nodes ? std::optional<std::int32_t>(*out.nodes * *out.processes_per_node)
                               : std::nullopt;
  return out;
}

}  // namespace pipetune::db
