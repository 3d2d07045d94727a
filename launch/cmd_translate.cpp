#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "data/corpus.h"
#include "dist/launcher.h"
#include "dist/mpi_communicator.h"
#include "io/run_config.h"
#include "launch/commands.h"
#include "models/from_config.h"
#include "models/translator.h"

namespace tessera::launch {

using dist::check_same_on_every_rank;
using dist::mpi_world_for_decoding;
using dist::root_first;
using models::check_same_decoding;
using models::load_translator;
using models::read_sources;
using models::Translator;
namespace {

// Whether `path` names the file open as descriptor `fd` (standard input or output named as a path,
// or the file it was redirected from or to).
bool is_file_of(const std::string& path, int fd) {
  struct stat named {};
  struct stat open {};
  return ::stat(path.c_str(), &named) == 0 && ::fstat(fd, &open) == 0 && named.st_dev == open.st_dev &&
         named.st_ino == open.st_ino;
}

// inputs.front(): the source file (empty: standard input).
void check_not_an_input(const std::string& path, const std::vector<std::pair<const char*, std::string>>& inputs) {
  std::error_code ec;
  for (const auto& [what, input] : inputs)
    if (!input.empty() && std::filesystem::equivalent(path, input, ec))
      fail("translate: -o '{}' is {} '{}': writing the translations would overwrite it", path, what, input);
  // The source on standard input (`< file`), read from a file that -o names too.
  struct stat in {};
  if (inputs.front().second.empty() && ::fstat(STDIN_FILENO, &in) == 0 && S_ISREG(in.st_mode) &&
      is_file_of(path, STDIN_FILENO))
    fail(
        "translate: -o '{}' is the file standard input reads the source from: writing the translations would "
        "overwrite it",
        path);
}

// Checked before the model is loaded: a translation of hours must not end in "cannot write", nor
// overwrite a file it reads (`inputs`: the source, the checkpoint, the vocabularies).
void check_writable_output(const std::string& path, const std::vector<std::pair<const char*, std::string>>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail("translate: cannot write '{}': it is a directory", path);
  check_not_an_input(path, inputs);
  // A link (or a chain of them) to a file not there yet is written through: the file is made in
  // the folder of the chain's end.
  const fs::path file = link_destination(path);
  const fs::path folder = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  if (fs::exists(folder, ec) && !fs::is_directory(folder, ec))
    fail("translate: cannot write '{}': '{}' is not a folder", path, folder.string());
  if (!fs::is_directory(folder, ec))
    fail("translate: cannot write '{}': folder '{}' does not exist", path, folder.string());
  // The file itself where it exists (it is replaced), else its folder (it is created there).
  const std::string target = fs::exists(path, ec) ? path : folder.string();
  if (::access(target.c_str(), W_OK) != 0) fail("translate: cannot write '{}': {}", path, std::strerror(errno));
}

// The lines, each ended by a newline, then flushed: 0, or the errno of the first failure.
int write_lines(std::FILE* f, const std::vector<std::string>& lines) {
  for (const std::string& l : lines)
    if (std::fwrite(l.data(), 1, l.size(), f) != l.size() || std::fputc('\n', f) == EOF) return errno;
  return std::fflush(f) == 0 ? 0 : errno;
}

// The temporary being written (empty: none), removed when SIGINT, SIGTERM or SIGHUP ends the run,
// or the collectives' watchdog (under mpirun, another rank hangs).
char g_temporary[4096];
volatile std::sig_atomic_t g_has_temporary = 0;

void remove_temporary() {
  if (g_has_temporary != 0) ::unlink(g_temporary);
}

void remove_temporary_and_die(int signal) {
  remove_temporary();
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

// Where the translations go, written as each buffer of them is done, so a long input is never held
// whole:
// - standard output (or a path naming it, written after what is already there: opened anew, it
//   would be truncated), flushed after each buffer, for a pipeline or a person typing;
// - a file, whole or not at all: into a temporary of its own beside it (mkstemp: a fresh name, never
//   a file or link already there) with the old file's mode and owner, renamed over it once complete,
//   removed by a failure, SIGINT, SIGTERM, SIGHUP or the collectives' watchdog;
// - in place where a rename would change more than the content: a pipe or a device as the lines
//   come; a link or a file with other hard links from such a temporary, copied in place at the end
//   (the rename would replace the link, or part the names); in a folder this user may not create
//   files in, at the end (the lines kept till then). So a failure leaves a file as it was. Where the
//   rename is refused (another user's file in a sticky folder), the temporary is copied in place.
class TranslationOutput {
 public:
  explicit TranslationOutput(const std::string& path)  // empty: standard output
      : path_(path), name_(path.empty() ? std::string("standard output") : fmt::format("'{}'", path)) {
    if (path.empty() || is_file_of(path, STDOUT_FILENO)) {
      file_ = stdout;
      return;
    }
    struct stat old {};
    existed_ = ::lstat(path.c_str(), &old) == 0;
    const bool replaceable = !existed_ || (S_ISREG(old.st_mode) && old.st_nlink == 1);
    if (replaceable && open_temporary(existed_ ? &old : nullptr)) return;
    struct stat target {};
    if (::stat(path.c_str(), &target) == 0 && !S_ISREG(target.st_mode)) {
      file_ = std::fopen(path.c_str(), "w");
      if (file_ == nullptr) fail("translate: cannot write {}: {}", name_, std::strerror(errno));
      return;
    }
    if (!replaceable) copy_in_place_ = open_temporary(nullptr);  // a link (a dangling one too), hard links
  }
  ~TranslationOutput() {
    if (file_ != nullptr && file_ != stdout) std::fclose(file_);
    forget_temporary(/*remove=*/true);
  }
  TranslationOutput(const TranslationOutput&) = delete;
  TranslationOutput& operator=(const TranslationOutput&) = delete;

  void write(const std::vector<std::string>& lines) {
    if (file_ == nullptr) {
      held_.insert(held_.end(), lines.begin(), lines.end());
      return;
    }
    if (const int error = write_lines(file_, lines); error != 0) fail_write(error);
  }

  void finish() {
    if (file_ == stdout) return;
    const bool written = file_ != nullptr;
    if (written) {
      const int error = std::fclose(file_) != 0 ? errno : 0;
      file_ = nullptr;
      if (error != 0) fail_write(error);
    }
    if (!tmp_.empty()) {
      if (!copy_in_place_) {
        if (::rename(tmp_.c_str(), path_.c_str()) == 0) {
          forget_temporary(/*remove=*/false);
          return;
        }
        if (errno != EPERM && errno != EACCES) fail_write(errno);
      }
      copy_temporary_in_place();
    } else if (!written) {
      write_held_in_place();
    }
  }

 private:
  bool open_temporary(const struct stat* old) {
    tmp_ = path_ + ".tmpXXXXXX";
    int fd = ::mkstemp(tmp_.data());
    if (fd < 0 && errno == ENAMETOOLONG) {  // a name near the longest a folder takes: a short one beside it
      tmp_ = (std::filesystem::path(path_).parent_path() / "tessera-translate.tmpXXXXXX").string();
      fd = ::mkstemp(tmp_.data());
    }
    if (fd >= 0 && tmp_.size() >= sizeof g_temporary) {  // too long for the signal handler's copy
      ::close(fd);
      ::unlink(tmp_.c_str());
      fd = -1;
    }
    if (fd < 0) {
      tmp_.clear();
      return false;
    }
    std::memcpy(g_temporary, tmp_.c_str(), tmp_.size() + 1);
    g_has_temporary = 1;
    dist::at_collective_timeout(remove_temporary);
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) {  // not one ignored (nohup, a shell's background job)
      struct sigaction now {};
      if (::sigaction(signal, nullptr, &now) == 0 && now.sa_handler != SIG_IGN)
        std::signal(signal, remove_temporary_and_die);
    }
    const mode_t mask = ::umask(0);
    ::umask(mask);
    [[maybe_unused]] const int mode_set = ::fchmod(fd, old != nullptr ? old->st_mode & 07777 : 0666 & ~mask);
    if (old != nullptr && (old->st_uid != ::geteuid() || old->st_gid != ::getegid())) {  // root writing another's
      [[maybe_unused]] const int owner_kept = ::fchown(fd, old->st_uid, old->st_gid);
    }
    file_ = ::fdopen(fd, "w");
    if (file_ == nullptr) {  // the destructor does not run for a constructor that throws
      const int error = errno;
      ::close(fd);
      forget_temporary(/*remove=*/true);
      fail("translate: cannot write {}: {}", name_, std::strerror(error));
    }
    return true;
  }

  void forget_temporary(bool remove) {
    if (tmp_.empty()) return;
    g_has_temporary = 0;
    if (remove) ::unlink(tmp_.c_str());
    tmp_.clear();
  }

  // The temporary's bytes written over the file, in place (not std::filesystem::copy_file: it sets
  // the file's mode too, which only its owner may).
  void copy_temporary_in_place() {
    std::FILE* from = std::fopen(tmp_.c_str(), "rb");
    std::FILE* to = from != nullptr ? std::fopen(path_.c_str(), "w") : nullptr;
    int error = to == nullptr ? errno : 0;
    char buffer[1 << 16];
    while (error == 0) {
      const std::size_t n = std::fread(buffer, 1, sizeof buffer, from);
      if (n < sizeof buffer && std::ferror(from) != 0) error = errno;
      if (error == 0 && std::fwrite(buffer, 1, n, to) != n) error = errno;
      if (n < sizeof buffer) break;
    }
    if (to != nullptr && std::fclose(to) != 0 && error == 0) error = errno;
    if (from != nullptr) std::fclose(from);
    if (error != 0) fail("translate: writing the translations to {} failed: {}", name_, std::strerror(error));
  }

  void write_held_in_place() {
    std::FILE* f = std::fopen(path_.c_str(), "w");
    if (f == nullptr) fail("translate: cannot write {}: {}", name_, std::strerror(errno));
    int error = write_lines(f, held_);
    if (std::fclose(f) != 0 && error == 0) error = errno;
    if (error != 0) fail("translate: writing the translations to {} failed: {}", name_, std::strerror(error));
  }

  [[noreturn]] void fail_write(int error) {
    if (tmp_.empty()) fail("translate: writing the translations to {} failed: {}", name_, std::strerror(error));
    fail("translate: writing the translations to {} failed: {} ({})", name_, std::strerror(error),
         existed_ ? fmt::format("{} is as it was", name_) : std::string("nothing written"));
  }

  std::string path_, name_;
  std::string tmp_;                // the temporary being written, renamed over path_ at the end
  std::FILE* file_ = nullptr;      // where write() goes: stdout, the temporary, a pipe or device; null: held_
  bool existed_ = false;           // path_ was there before
  bool copy_in_place_ = false;     // the temporary is copied over path_ at the end, not renamed
  std::vector<std::string> held_;  // a file written in place at the end, no temporary possible
};

// The next lines of the source, at most `max_lines`; with `interactive` (a person typing), fewer
// where no more has been typed yet, so each sentence is translated at once. Otherwise always
// `max_lines` (but at the end): the batches, and so the last bits of the scores, do not depend on
// how a pipe's writer paces its lines. None: the end.
std::vector<std::string> next_source_lines(data::LineReader& reader, std::int64_t max_lines, bool interactive) {
  std::vector<std::string> lines;
  std::string line;
  while (std::ssize(lines) < max_lines && (lines.empty() || !interactive || reader.ready()) && reader.next(line))
    lines.push_back(std::move(line));
  return lines;
}

// --nbest N needs a beam of N at least: the search keeps no more hypotheses.
void check_nbest(std::int64_t n, const models::DecodeOptions& dec, std::int64_t given_beam) {
  if (n > dec.beam)
    throw EveryRankError(fmt::format(
        "translate: --nbest {} is more than the beam size {} ({}): the search keeps no more hypotheses than its beam "
        "(raise --beam)",
        n, dec.beam, given_beam > 0 ? "--beam" : "decode.beam of the checkpoint's config"));
}

// The n best translations of each source in Marian's and Moses' n-best format, one a line; LINE
// counts from `first_line` (the lines of the buffers before).
std::vector<std::string> nbest_lines(const Translator& translator,
                                     const std::vector<std::vector<std::int32_t>>& sources,
                                     const models::DecodeOptions& dec, std::int64_t n, std::int64_t batch,
                                     dist::Communicator* world, std::int64_t first_line) {
  std::vector<std::string> lines;
  const auto lists = translator.translate_nbest(sources, dec, n, batch, world);
  for (std::size_t i = 0; i < lists.size(); ++i)
    for (const auto& h : lists[i])
      lines.push_back(fmt::format("{} ||| {} ||| F0= {:.6f} ||| {:.6f}", first_line + static_cast<std::int64_t>(i),
                                  h.text, h.log_prob, h.score));
  return lines;
}

// translate's command line, as parsed.
struct TranslateOptions {
  std::vector<std::string> checkpoints;
  std::string input, output, vocab, vocab_tgt;
  std::int64_t beam = 0, batch = 0, nbest = 0, buffer = 10000;
  double length_penalty = -1;
  std::string device = "cpu";
  bool sample = false;
  models::SamplingOptions sampling;
  std::int64_t seed = 1;
  double timeout_s = 300;  // under mpirun, as parallel.timeout_s
};

// The translate subcommand and its options, parsed into `opt`.
CLI::App* declare_translate_options(CLI::App& parent, TranslateOptions& opt) {
  CLI::App* cmd = parent.add_subcommand(
      "translate",
      "Translate sentences (one per line, from a file or stdin) with a trained checkpoint, or an ensemble of several");
  cmd->add_option(
         "--checkpoint", opt.checkpoints,
         "Any checkpoint: model.h5, checkpoint_<step>.h5, checkpoint_best.h5 or an average; several (of models "
         "trained with the same vocabularies): an ensemble, the mean of their probabilities, with the first's "
         "decoding settings")
      ->required();
  cmd->add_option("--input,-i", opt.input, "Source sentences, one per line (default, or -: stdin)");
  cmd->add_option("--output,-o", opt.output,
                  "Where to write translations (default, or -: stdout; not a file it reads: the input, the checkpoint, "
                  "a vocabulary)");
  cmd->add_option("--vocab", opt.vocab,
                  "SentencePiece model, the source side's if not joint (default: the one the checkpoint holds, which "
                  "one given must equal)");
  cmd->add_option("--vocab-tgt", opt.vocab_tgt,
                  "Target-side SentencePiece model of a run with one vocabulary per language (default: the one the "
                  "checkpoint holds, which one given must equal)");
  auto* beam = add_whole_number_option(cmd, "--beam", opt.beam, 1, 1000,
                                       "Beam size (default: decode.beam of the checkpoint's config)");
  auto* length_penalty =
      cmd->add_option("--length-penalty", opt.length_penalty, "Length penalty alpha (default: from the config)")
          ->check(finite_range(0.0, 10.0));
  add_whole_number_option(cmd, "--batch", opt.batch, 1, 100000,
                          "Sentences decoded together (default: from the config)");
  add_whole_number_option(cmd, "--buffer", opt.buffer, 1, 100000000,
                          "Lines read, sorted by length into batches and translated before the next are read: the "
                          "memory a translation takes is one buffer's, whatever the input's length (from a terminal, "
                          "fewer: what has been typed; 1: a pipe's lines translated as they arrive)")
      ->capture_default_str();
  auto* nbest = add_whole_number_option(
      cmd, "--nbest", opt.nbest, 1, 1000,
      "Write the N best translations of each sentence (1 to the beam size), one a line: 'LINE ||| "
      "translation ||| F0= log-probability ||| score' (LINE from 0; score: the length-normalized "
      "log-probability the beam ranks by), as Marian and Moses write n-best lists");
  auto* sample = cmd->add_flag("--sample", opt.sample,
                               "Draw each token from the model's distribution instead of searching (one translation "
                               "a sentence, for back-translation): the same seed gives the same draws, under mpirun "
                               "too (across --batch sizes, but for last-bit differences of the probabilities)")
                     ->excludes(beam)
                     ->excludes(nbest)
                     ->excludes(length_penalty);
  add_whole_number_option(cmd, "--top-k", opt.sampling.top_k, 0, std::int64_t{1} << 30,
                          "--sample: only from the K most likely tokens (0: all)")
      ->needs(sample);
  cmd->add_option("--temperature", opt.sampling.temperature,
                  "--sample: divides the log-probabilities (below 1: closer to greedy; above 1: more diverse)")
      ->check(finite_range(1e-3, 1e3))
      ->capture_default_str()
      ->needs(sample);
  add_whole_number_option(cmd, "--seed", opt.seed, 0, std::numeric_limits<std::int64_t>::max(),
                          "--sample: seed of the draws")
      ->needs(sample);
  cmd->add_option("--device", opt.device,
                  "Decode on the cpu or on a GPU (cuda: the first GPU; under mpirun, local rank % GPUs)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  add_timeout_option(cmd, opt.timeout_s);
  return cmd;
}

// -i and -o read ("-": standard input and output, empty after), and checked before the model is
// loaded: under mpirun every rank names its input file, and rank 0's output overwrites none it reads.
void check_input_and_output(TranslateOptions& opt, dist::MpiCommunicator* world, bool root) {
  if (opt.input == "-") opt.input.clear();  // standard input, as score's --hyp -
  // A terminal named as a file (-i /dev/stdin, /dev/tty) is read as standard input is, so that
  // each sentence typed is translated at once (a file's buffer would wait for --buffer lines).
  if (!opt.input.empty() && ::isatty(STDIN_FILENO) != 0 && is_file_of(opt.input, STDIN_FILENO)) opt.input.clear();
  // Counted: under an MPMD launch some ranks may have -i and others not.
  if (world != nullptr && world->size() > 1 && dist::count_ranks(opt.input.empty(), world) > 0)
    throw EveryRankError(
        "translate under mpirun: give the sentences with -i FILE (mpirun passes standard input to rank 0 "
        "only)");
  if (opt.output == "-") opt.output.clear();  // standard output, the default
  if (root && !opt.output.empty()) {
    std::vector<std::pair<const char*, std::string>> inputs = {
        {"the input", opt.input}, {"the --vocab file", opt.vocab}, {"the --vocab-tgt file", opt.vocab_tgt}};
    for (const std::string& c : opt.checkpoints) inputs.emplace_back("the checkpoint", c);
    check_writable_output(opt.output, inputs);
  }
}

// The checkpoint's decoding settings with the options given over them, checked the same on every
// rank (with `batch`, the sentences decoded together).
models::DecodeOptions decoding_of(const TranslateOptions& opt, const io::RunConfig& cfg, std::int64_t batch,
                                  dist::Communicator* world) {
  models::DecodeOptions dec = models::decode_options(cfg.decode);
  if (opt.beam > 0) dec.beam = opt.beam;
  if (opt.length_penalty >= 0) dec.length_penalty = opt.length_penalty;
  if (opt.sample) {
    dec.sampling = opt.sampling;
    dec.sampling->seed = static_cast<std::uint64_t>(opt.seed);
  }
  check_same_decoding(dec, batch, opt.nbest, world);
  check_same_on_every_rank(static_cast<std::uint64_t>(opt.buffer), world, fmt::format("--buffer ({})", opt.buffer),
                           "were given another number than rank 0: give every rank the same command line");
  if (opt.nbest > 0) check_nbest(opt.nbest, dec, opt.beam);
  return dec;
}

// Rank 0's progress on stderr, counting the input's lines (for the ETA) when it is a file shown on a
// terminal. None for a person typing, nor on a terminal that shows the translations as they come.
std::unique_ptr<Progress> translation_progress(const TranslateOptions& opt, bool root) {
  const Progress::Style style = Progress::stderr_style();
  const bool typing = opt.input.empty() && ::isatty(STDIN_FILENO) != 0;
  const bool shares_terminal = opt.output.empty() && ::isatty(STDOUT_FILENO) != 0 && style == Progress::Style::terminal;
  if (!root || typing || shares_terminal || style == Progress::Style::off) return nullptr;
  std::int64_t lines = 0;
  if (!opt.input.empty() && style == Progress::Style::terminal) {
    data::LineReader reader(opt.input);
    for (std::string line; reader.next(line);) ++lines;
  }
  return std::make_unique<Progress>("translate", "sentences", lines);
}

int run_translation(TranslateOptions& opt) {
  // Under mpirun the ranks share the sentences (each translates a share of the batches)
  // and rank 0 writes all the translations.
  const std::unique_ptr<dist::MpiCommunicator> world = mpi_world_for_decoding(opt.timeout_s);
  const bool root = world == nullptr || world->rank() == 0;
  check_input_and_output(opt, world.get(), root);
  const Device device = opt.device == "cuda" ? Device::cuda : Device::cpu;
  const std::unique_ptr<Translator> translator =
      load_translator(world.get(), opt.checkpoints, opt.vocab, opt.vocab_tgt, device);
  // The vocabulary files an older checkpoint's translator found by itself (no option named them).
  if (root && !opt.output.empty())
    for (const std::string& file : translator->vocabulary_files())
      check_not_an_input(opt.output, {{"the vocabulary file", file}});
  const io::RunConfig& cfg = translator->config();
  const std::int64_t batch = opt.batch > 0 ? opt.batch : cfg.decode.batch_sentences;
  const models::DecodeOptions dec = decoding_of(opt, cfg, batch, world.get());
  // Buffer by buffer: read (rank 0 first, as the model), translated with the ranks sharing its batches,
  // written by rank 0. Every rank reads the file itself and the ranks' buffers must match.
  const std::string input_name =
      opt.input.empty() ? std::string("standard input") : fmt::format("input file '{}'", opt.input);
  std::unique_ptr<data::LineReader> reader;
  const auto read_buffer = [&](std::int64_t first_line) {
    return read_sources(
        world.get(), *translator, input_name,
        [&] {
          if (reader == nullptr)
            reader = opt.input.empty() ? std::make_unique<data::LineReader>(data::kStandardInput)
                                       : std::make_unique<data::LineReader>(opt.input);
          return next_source_lines(*reader, opt.buffer, opt.input.empty() && ::isatty(STDIN_FILENO) != 0);
        },
        first_line);
  };
  std::vector<std::vector<std::int32_t>> sources = read_buffer(0);
  // Opened once the input has been read from: a missing input is named at once, not after
  // waiting for an output FIFO's reader, which the other ranks wait for without the timeout.
  std::optional<TranslationOutput> output;
  root_first(world.get(), [&] {
    if (root) output.emplace(opt.output);
  });
  const std::unique_ptr<Progress> progress = translation_progress(opt, root);
  translator->report_progress_to(progress.get());
  for (std::int64_t first_line = 0; !sources.empty(); sources = read_buffer(first_line)) {
    const std::vector<std::string> lines =
        opt.nbest > 0 ? nbest_lines(*translator, sources, dec, opt.nbest, batch, world.get(), first_line)
                      : translator->translate(sources, dec, batch, world.get(), first_line);
    if (root) output->write(lines);
    first_line += std::ssize(sources);
  }
  if (root) output->finish();
  if (progress != nullptr) progress->finish();
  return 0;
}

}  // namespace

Command add_translate_command(CLI::App& parent) {
  auto opt = std::make_shared<TranslateOptions>();
  CLI::App* cmd = declare_translate_options(parent, *opt);
  return {cmd, [opt] { return run_translation(*opt); }};
}

}  // namespace tessera::launch
