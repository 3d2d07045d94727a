#include "launch/command_line.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <vector>

#include "common/spelling.h"
#include "launch/schema.h"

namespace tessera::launch {
namespace {

// The named subcommand `word` of `app`; nullptr when it has none of that name. Option groups are
// nameless subcommands: never matched.
CLI::App* named_subcommand(CLI::App& app, const std::string& word) {
  for (CLI::App* sub : app.get_subcommands([](const CLI::App* a) { return !a->get_name().empty(); }))
    if (sub->get_name() == word) return sub;
  return nullptr;
}

std::vector<std::string> subcommand_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* a) { return !a->get_name().empty(); }))
    names.push_back(sub->get_name());
  return names;
}

// "-1", "-0.5", "-1e-3", "-inf": a value, not an option.
bool is_number(const std::string& word) {
  char* end = nullptr;
  std::strtod(word.c_str(), &end);
  return end != word.c_str() && *end == '\0';
}

// A word CLI11 may read as options: '-' and a letter or '-' ("-3.txt", as CLI11 reads it where no
// option is named by a digit, and "-" alone are arguments).
bool looks_like_option(const std::string& word) {
  return word.size() > 1 && word[0] == '-' && !std::isdigit(static_cast<unsigned char>(word[1])) && !is_number(word);
}

// The option `word` names on `path` (the app, then each subcommand given), nearest the word first:
// "--name", "--name=value", "-n", or "-nvalue" (a short option with its value attached). `attached`
// tells whether the word holds the value.
CLI::Option* find_option(const std::vector<CLI::App*>& path, const std::string& word, bool& attached) {
  const bool long_form = word.starts_with("--");
  const std::size_t equals = word.find('=');
  const std::string name = long_form ? word.substr(0, equals) : word.substr(0, 2);
  attached = long_form ? equals != std::string::npos : word.size() > 2;
  for (auto app = path.rbegin(); app != path.rend(); ++app)
    if (CLI::Option* option = (*app)->get_option_no_throw(name)) return option;
  return nullptr;
}

// --help and --version: CLI11 answers them whatever else the line holds.
bool asks_for_help_or_version(const CLI::Option* option) {
  const std::vector<std::string>& names = option->get_lnames();
  return std::find(names.begin(), names.end(), "help") != names.end() ||
         std::find(names.begin(), names.end(), "version") != names.end();
}

// The long names of the innermost command's options (without "--"), for the hint.
std::vector<std::string> long_option_names(CLI::App& app) {
  std::vector<std::string> names;
  const auto add = [&](const CLI::Option* option) {
    names.insert(names.end(), option->get_lnames().begin(), option->get_lnames().end());
  };
  for (const CLI::Option* option : app.get_options()) add(option);
  for (CLI::App* group : app.get_subcommands([](const CLI::App* a) { return a->get_name().empty(); }))
    for (const CLI::Option* option : group->get_options()) add(option);
  return names;
}

std::string command_name(const std::vector<CLI::App*>& path) {
  std::vector<std::string> names{"tessera"};
  for (std::size_t i = 1; i < path.size(); ++i) names.push_back(path[i]->get_name());
  return fmt::format("{}", fmt::join(names, " "));
}

// What an unknown option may have meant, most likely first: the start of one option's name alone
// ("--temp" for "--temperature"); for train, a config key by its own name ("--seed 3" is
// "--set train.seed=3"); an option one typo away ("--conifg"); for train, a config key one typo away.
std::string unknown_option_hint(const std::vector<CLI::App*>& path, const std::string& word, const char* next) {
  const std::size_t equals = word.find('=');
  const std::string name = word.substr(0, equals).substr(word.find_first_not_of('-'));
  const std::vector<std::string> options = long_option_names(*path.back());
  const auto option_hint = [](const std::string& option) { return fmt::format("; did you mean '--{}'?", option); };
  const auto key_hint = [&](const std::string& key) {
    const std::string value = equals != std::string::npos                   ? word.substr(equals + 1)
                              : next != nullptr && !looks_like_option(next) ? std::string(next)
                                                                            : std::string("VALUE");
    return fmt::format("; config keys are set with --set: did you mean '--set {}={}'?", key, value);
  };
  if (name.size() >= 2) {
    std::vector<std::string> longer;
    std::copy_if(options.begin(), options.end(), std::back_inserter(longer),
                 [&](const std::string& option) { return option.starts_with(name); });
    if (longer.size() == 1) return option_hint(longer.front());
  }
  const bool train = path.back()->get_name() == "train";
  std::string key = name;
  std::replace(key.begin(), key.end(), '-', '_');
  if (train)
    for (const io::KeySpec& spec : tessera_schema().keys())
      if (spec.key.ends_with("." + key)) return key_hint(spec.key);
  if (const std::string option = closest_spelling(options, name); !option.empty()) return option_hint(option);
  if (train)
    if (const std::string nearest = tessera_schema().nearest(key); !nearest.empty()) return key_hint(nearest);
  return fmt::format(" ({} --help lists the options)", command_name(path));
}

}  // namespace

std::optional<CommandLineError> check_command_line(CLI::App& app, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] == '\0')
      return CommandLineError{fmt::format("tessera: argument {} is empty (an unset shell variable?){}", i,
                                          i > 1 ? fmt::format(" after '{}'", argv[i - 1]) : std::string()),
                              CLI::ExitCodes::ValidationError};
  // The first mistake is reported, unless help (or the version) is asked for where an option may
  // stand: CLI11 then prints the help of the command reached, whatever else the line holds
  // ("tessera --help trian").
  std::optional<CommandLineError> mistake;
  const auto note = [&](std::string message, CLI::ExitCodes code) {
    if (!mistake) mistake = CommandLineError{std::move(message), code};
  };
  std::vector<CLI::App*> path{&app};
  bool value_expected = false;  // the word before was an option that takes a value and had none attached
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;  // the rest are arguments
    if (!looks_like_option(word)) {
      if (value_expected) {
        value_expected = false;
        continue;
      }
      // Where the command has subcommands, the first word names one ("tessera bench kernels").
      const std::vector<std::string> names = subcommand_names(*path.back());
      if (names.empty()) continue;  // an argument
      if (CLI::App* sub = named_subcommand(*path.back(), word))
        path.push_back(sub);
      else
        note(fmt::format("{0}: unknown subcommand '{1}': one of {2} ({0} --help)", command_name(path), word,
                         fmt::join(names, ", ")),
             CLI::ExitCodes::ExtrasError);
      continue;
    }
    bool attached = false;
    const CLI::Option* option = find_option(path, word, attached);
    if (value_expected) {
      value_expected = false;
      // Only an option's own spelling ("-i", "--input", "--input=x") stands where a value belongs;
      // "-ref.txt" is a value, not -r with "ef.txt".
      if (option != nullptr && !(attached && !word.starts_with("--")))
        note(fmt::format("{}: option '{}' needs a value, but the option '{}' follows it", command_name(path),
                         argv[i - 1], word),
             CLI::ExitCodes::ArgumentMismatch);
      continue;
    }
    if (option == nullptr) {
      note(fmt::format("{}: unknown option '{}'{}", command_name(path), word,
                       unknown_option_hint(path, word, i + 1 < argc ? argv[i + 1] : nullptr)),
           CLI::ExitCodes::ExtrasError);
      continue;
    }
    if (asks_for_help_or_version(option)) return std::nullopt;
    value_expected = !attached && option->get_expected_min() > 0;
  }
  return mistake;
}

}  // namespace tessera::launch
