#include "launch/command_line.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <vector>

#include "common/text.h"
#include "io/run_config.h"
#include "models/from_config.h"

namespace tessera::launch {
namespace {

bool is_named(const CLI::App* app) { return !app->get_name().empty(); }  // option groups are nameless

// The named subcommand `word` of `app`; nullptr when it has none of that name.
CLI::App* named_subcommand(CLI::App& app, const std::string& word) {
  for (CLI::App* sub : app.get_subcommands(is_named))
    if (sub->get_name() == word) return sub;
  return nullptr;
}

std::vector<std::string> subcommand_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands(is_named)) names.push_back(sub->get_name());
  return names;
}

// A word as CLI11 2.1.2 classifies it (App::_recognize): a long option "--name[=value]", a short
// one "-n[value]", or else an argument. '-' and a digit is an argument ("-1", "-0.5", "-3.txt":
// no option is named by a digit), and so are "-", "---" and "-!x" (no option name starts so).
struct OptionWord {
  std::string name;   // "--name" or "-n"
  std::string value;  // what the word holds after "=" or after "-n"; empty: the value is the next word
};
std::optional<OptionWord> as_option_word(const std::string& word) {
  std::string name, value;
  if (CLI::detail::split_long(word, name, value)) return OptionWord{"--" + name, value};
  if (CLI::detail::split_short(word, name, value) && !std::isdigit(static_cast<unsigned char>(name[0])))
    return OptionWord{"-" + name, value};
  return std::nullopt;
}

// --help and --version: CLI11 answers them whatever the words after them are.
bool asks_for_help_or_version(const CLI::Option* option) {
  const std::vector<std::string>& names = option->get_lnames();
  return std::find(names.begin(), names.end(), "help") != names.end() ||
         std::find(names.begin(), names.end(), "version") != names.end();
}

// The long names of a command's options (without "--"), its option groups' included.
std::vector<std::string> long_option_names(CLI::App& app) {
  std::vector<std::string> names;
  const auto add = [&](const CLI::Option* option) {
    names.insert(names.end(), option->get_lnames().begin(), option->get_lnames().end());
  };
  for (const CLI::Option* option : app.get_options()) add(option);
  for (CLI::App* group : app.get_subcommands([](const CLI::App* a) { return !is_named(a); }))
    for (const CLI::Option* option : group->get_options()) add(option);
  return names;
}

std::string command_name(const std::vector<CLI::App*>& path) {
  std::vector<std::string> names{"tessera"};
  for (std::size_t i = 1; i < path.size(); ++i) names.push_back(path[i]->get_name());
  return fmt::format("{}", fmt::join(names, " "));
}

// What an unknown option may have meant, most likely first:
//  - the option of a command before or after this one ("train --version", "bench --repeats 3
//    kernels"): CLI11 takes a command's options only after its name and before a subcommand's;
//  - the start of one option's name ("--temp" for "--temperature");
//  - for train, a config key by its own name ("--seed 3" is "--set train.seed=3"), before a typo
//    ("--seed" is one edit from "--set"), or by the start of its name ("--lr" for train.lr_*);
//  - an option one typo away ("--conifg"); for train, a config key one typo away.
std::string unknown_option_hint(const std::vector<CLI::App*>& path, const OptionWord& word, const char* next) {
  for (std::size_t i = 0; i + 1 < path.size(); ++i)
    if (path[i]->get_option_no_throw(word.name) != nullptr)
      return fmt::format("; it is an option of '{}': give it before '{}'",
                         command_name({path.begin(), path.begin() + static_cast<std::ptrdiff_t>(i) + 1}),
                         path[i + 1]->get_name());
  for (CLI::App* sub : path.back()->get_subcommands(is_named))
    if (sub->get_option_no_throw(word.name) != nullptr)
      return fmt::format("; it is an option of '{} {}': give it after '{}'", command_name(path), sub->get_name(),
                         sub->get_name());

  const std::string name = word.name.substr(word.name.find_first_not_of('-'));
  const std::vector<std::string> options = long_option_names(*path.back());
  const auto option_hint = [](const std::string& option) { return fmt::format("; did you mean '--{}'?", option); };
  const auto starting_with = [](const std::vector<std::string>& names, const std::string& start) {
    std::vector<std::string> found;
    std::copy_if(names.begin(), names.end(), std::back_inserter(found),
                 [&](const std::string& n) { return n.starts_with(start); });
    return found;
  };
  if (const auto longer = starting_with(options, name); name.size() >= 2 && longer.size() == 1)
    return option_hint(longer.front());

  const bool train = path.back()->get_name() == "train";
  std::string key = name;
  std::replace(key.begin(), key.end(), '-', '_');
  std::vector<std::string> keys, key_names;  // "train.max_steps", "max_steps"
  for (const io::KeySpec& spec : io::run_schema().keys()) {
    keys.push_back(spec.key);
    key_names.push_back(spec.key.substr(spec.key.rfind('.') + 1));
  }
  const auto key_hint = [&](const std::vector<std::string>& found) {
    const std::string value = !word.value.empty()                        ? word.value
                              : next != nullptr && !as_option_word(next) ? std::string(next)
                                                                         : std::string("VALUE");
    std::vector<std::string> settings;
    for (const std::string& k : found) settings.push_back(fmt::format("--set {}={}", k, value));
    return fmt::format("; config keys are set with --set: did you mean '{}'?", fmt::join(settings, "' or '"));
  };
  const auto keys_named = [&](const auto& matches) {
    std::vector<std::string> found;
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (matches(key_names[i])) found.push_back(keys[i]);
    return found;
  };
  if (train)
    if (const auto found = keys_named([&](const std::string& n) { return n == key; }); !found.empty())
      return key_hint(found);
  if (const std::string option = closest_spelling(options, name); !option.empty()) return option_hint(option);
  if (train) {
    if (const auto found = keys_named([&](const std::string& n) { return key.size() >= 2 && n.starts_with(key); });
        !found.empty() && found.size() <= 3)
      return key_hint(found);
    if (const std::string nearest = io::run_schema().nearest(key); !nearest.empty()) return key_hint({nearest});
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
  // The first mistake is reported, unless --help (or --version) stands where an option may: then
  // the line is CLI11's, which prints the help ("tessera --help trian") unless a value before it
  // fails its own check.
  std::optional<CommandLineError> mistake;
  const auto note = [&](std::string message, CLI::ExitCodes code) {
    if (!mistake) mistake = CommandLineError{std::move(message), code};
  };
  std::vector<CLI::App*> path{&app};
  bool value_expected = false;  // the word before was an option that takes a value and had none attached
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    // The rest are arguments (or, after an option's values, CLI11 ends its list there: either
    // way, no word after it is checked).
    if (word == "--") break;
    const std::optional<OptionWord> option_word = as_option_word(word);
    if (!option_word) {
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
    // CLI11 looks up the options of the command named last (and of its option groups) only.
    const CLI::Option* option = path.back()->get_option_no_throw(option_word->name);
    if (value_expected) {
      value_expected = false;
      // Only an option's own spelling ("-i", "--input", "--input=x") stands where a value belongs;
      // "-ref.txt" is a value, not -r with "ef.txt".
      if (option != nullptr && (word.starts_with("--") || option_word->value.empty()))
        note(fmt::format("{}: option '{}' needs a value, but the option '{}' follows it", command_name(path),
                         argv[i - 1], word),
             CLI::ExitCodes::ArgumentMismatch);
      continue;
    }
    if (option == nullptr) {
      note(fmt::format("{}: unknown option '{}'{}", command_name(path), word,
                       unknown_option_hint(path, *option_word, i + 1 < argc ? argv[i + 1] : nullptr)),
           CLI::ExitCodes::ExtrasError);
      continue;
    }
    if (asks_for_help_or_version(option)) return std::nullopt;
    value_expected = option_word->value.empty() && option->get_expected_min() > 0;
  }
  return mistake;
}

}  // namespace tessera::launch
