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

// "-1", "-0.5", "-1e-3": a value, not an option.
bool is_number(const std::string& word) {
  char* end = nullptr;
  std::strtod(word.c_str(), &end);
  return end != word.c_str() && *end == '\0';
}

bool looks_like_option(const std::string& word) { return word.size() > 1 && word[0] == '-' && !is_number(word); }

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

// Every spelling of the options of the innermost command, for the nearest-name hint.
std::vector<std::string> option_spellings(CLI::App& app) {
  std::vector<std::string> names;
  const auto add = [&](const CLI::Option* option) {
    for (const std::string& l : option->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : option->get_snames()) names.push_back("-" + s);
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

// What an unknown option may have meant: another option of the command (a typo, or the start of
// one name alone), or for train a config key ("--max-steps 3" is "--set train.max_steps=3").
std::string unknown_option_hint(const std::vector<CLI::App*>& path, const std::string& word, const char* next) {
  const std::string name = word.substr(0, word.find('='));
  const std::vector<std::string> options = option_spellings(*path.back());
  std::string option = closest_spelling(options, name);
  // Else an abbreviation of one option ("--check" for "--checkpoint").
  if (option.empty() && name.size() > 3) {
    std::vector<std::string> longer;
    std::copy_if(options.begin(), options.end(), std::back_inserter(longer),
                 [&](const std::string& candidate) { return candidate.starts_with(name); });
    if (longer.size() == 1) option = longer.front();
  }
  if (!option.empty()) return fmt::format("; did you mean '{}'?", option);
  if (path.back()->get_name() == "train") {
    std::string key = name.substr(name.find_first_not_of('-'));
    std::replace(key.begin(), key.end(), '-', '_');
    const std::string config_key = tessera_schema().nearest(key);
    if (!config_key.empty()) {
      const std::size_t equals = word.find('=');
      const std::string value = equals != std::string::npos                   ? word.substr(equals + 1)
                                : next != nullptr && !looks_like_option(next) ? std::string(next)
                                                                              : std::string("VALUE");
      return fmt::format("; config keys are set with --set: did you mean '--set {}={}'?", config_key, value);
    }
  }
  return fmt::format(" ({} --help lists the options)", command_name(path));
}

}  // namespace

std::optional<CommandLineError> check_command_line(CLI::App& app, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] == '\0')
      return CommandLineError{fmt::format("tessera: argument {} is empty (an unset shell variable?){}", i,
                                          i > 1 ? fmt::format(" after '{}'", argv[i - 1]) : std::string()),
                              CLI::ExitCodes::ValidationError};
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
      CLI::App* sub = named_subcommand(*path.back(), word);
      if (sub == nullptr)
        return CommandLineError{fmt::format("{0}: unknown subcommand '{1}': one of {2} ({0} --help)",
                                            command_name(path), word, fmt::join(names, ", ")),
                                CLI::ExitCodes::ExtrasError};
      path.push_back(sub);
      continue;
    }
    bool attached = false;
    const CLI::Option* option = find_option(path, word, attached);
    if (option == nullptr) {
      // A value that starts with '-' ("-i -notes.txt") is CLI11's to take.
      if (value_expected) {
        value_expected = false;
        continue;
      }
      return CommandLineError{fmt::format("{}: unknown option '{}'{}", command_name(path), word,
                                          unknown_option_hint(path, word, i + 1 < argc ? argv[i + 1] : nullptr)),
                              CLI::ExitCodes::ExtrasError};
    }
    if (value_expected)
      return CommandLineError{fmt::format("{}: option '{}' needs a value, but the option '{}' follows it",
                                          command_name(path), argv[i - 1], word),
                              CLI::ExitCodes::ArgumentMismatch};
    value_expected = !attached && option->get_expected_min() > 0;
  }
  return std::nullopt;
}

}  // namespace tessera::launch
