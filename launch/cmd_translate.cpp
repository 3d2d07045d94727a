#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "data/corpus.h"
#include "dist/mpi_communicator.h"
#include "launch/commands.h"
#include "launch/process_grid.h"
#include "launch/schema.h"
#include "launch/task.h"

namespace tessera::launch {
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

// Writes `path` whole or not at all: into a temporary of its own beside it (mkstemp: a fresh name,
// never a file or link already there), renamed over it once complete, with the old file's mode
// and owner. False, having written nothing, where a rename would change more than the content (a
// link, a device or a pipe, a file with other hard links) or cannot be done (a folder this user
// may not create files in; another user's file in a sticky folder): the caller writes in place.
bool replace_whole(const std::string& path, const std::string& name, const std::vector<std::string>& lines) {
  struct stat old {};
  const bool exists = ::lstat(path.c_str(), &old) == 0;
  if (exists && (!S_ISREG(old.st_mode) || old.st_nlink > 1)) return false;
  std::string tmp = path + ".tmpXXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0 && errno == ENAMETOOLONG) {  // a name near the longest a folder takes: a short one beside it
    tmp = (std::filesystem::path(path).parent_path() / "tessera-translate.tmpXXXXXX").string();
    fd = ::mkstemp(tmp.data());
  }
  if (fd < 0) return false;
  const mode_t mask = ::umask(0);
  ::umask(mask);
  [[maybe_unused]] const int mode_set = ::fchmod(fd, exists ? old.st_mode & 07777 : 0666 & ~mask);
  if (exists && (old.st_uid != ::geteuid() || old.st_gid != ::getegid())) {  // root writing another's file
    [[maybe_unused]] const int owner_kept = ::fchown(fd, old.st_uid, old.st_gid);
  }
  std::FILE* f = ::fdopen(fd, "w");
  int error = f == nullptr ? errno : write_lines(f, lines);
  if (f == nullptr) ::close(fd);
  if (f != nullptr && std::fclose(f) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) {
    error = errno;
    if (error == EPERM || error == EACCES) {
      ::unlink(tmp.c_str());
      return false;
    }
  }
  if (error == 0) return true;
  ::unlink(tmp.c_str());
  fail("translate: writing the translations to {} failed: {} ({})", name, std::strerror(error),
       exists ? fmt::format("{} is as it was", name) : std::string("nothing written"));
}

// Writes the lines to `path` (empty: standard output): a file whole or not at all (replace_whole),
// else in place. Standard output named as a path (/dev/stdout, or the file it was redirected to)
// is written through standard output, after what the caller wrote there (opened anew, it would be
// truncated and written from its start).
void write_translations(const std::string& path, const std::vector<std::string>& lines) {
  const std::string name = path.empty() ? std::string("standard output") : fmt::format("'{}'", path);
  const bool is_stdout = path.empty() || is_file_of(path, STDOUT_FILENO);
  if (!is_stdout && replace_whole(path, name, lines)) return;
  std::FILE* f = is_stdout ? stdout : std::fopen(path.c_str(), "w");
  if (f == nullptr) fail("translate: cannot write {}: {}", name, std::strerror(errno));
  int error = write_lines(f, lines);
  if (f != stdout && std::fclose(f) != 0 && error == 0) error = errno;
  if (error != 0) fail("translate: writing the translations to {} failed: {}", name, std::strerror(error));
}

// Standard input's lines, checked as read_lines checks a file's ("\r" ends dropped, UTF-8).
std::vector<std::string> read_stdin_lines() {
  std::vector<std::string> lines = data::read_standard_input_lines();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string& line = lines[i];
    if (!line.empty() && line.back() == '\r') line.pop_back();
    data::check_utf8_line(line, "<stdin>", static_cast<std::int64_t>(i) + 1);
  }
  return lines;
}

// The n best translations of each source in Marian's and Moses' n-best format, one a line.
std::vector<std::string> nbest_lines(const Translator& translator,
                                     const std::vector<std::vector<std::int32_t>>& sources,
                                     const models::DecodeOptions& dec, std::int64_t n, std::int64_t given_beam,
                                     std::int64_t batch, dist::Communicator* world) {
  if (n > dec.beam)
    throw EveryRankError(fmt::format(
        "translate: --nbest {} is more than the beam size {} ({}): the search keeps no more hypotheses than its beam "
        "(raise --beam)",
        n, dec.beam, given_beam > 0 ? "--beam" : "decode.beam of the checkpoint's config"));
  std::vector<std::string> lines;
  const auto lists = translator.translate_nbest(sources, dec, n, batch, world);
  for (std::size_t i = 0; i < lists.size(); ++i)
    for (const auto& h : lists[i])
      lines.push_back(fmt::format("{} ||| {} ||| F0= {:.6f} ||| {:.6f}", i, h.text, h.log_prob, h.score));
  return lines;
}

}  // namespace

Command add_translate_command(CLI::App& parent) {
  struct Options {
    std::vector<std::string> checkpoints;
    std::string input, output, vocab, vocab_tgt;
    std::int64_t beam = 0, batch = 0, nbest = 0;
    double length_penalty = -1;
    std::string device = "cpu";
    bool sample = false;
    models::SamplingOptions sampling;
    std::int64_t seed = 1;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = parent.add_subcommand(
      "translate",
      "Translate sentences (one per line, from a file or stdin) with a trained checkpoint, or an ensemble of several");
  cmd->add_option(
         "--checkpoint", opt->checkpoints,
         "Any checkpoint: model.h5, checkpoint_<step>.h5, checkpoint_best.h5 or an average; several (of models "
         "trained with the same vocabularies): an ensemble, the mean of their probabilities, with the first's "
         "decoding settings")
      ->required();
  cmd->add_option("--input,-i", opt->input, "Source sentences, one per line (default, or -: stdin)");
  cmd->add_option("--output,-o", opt->output,
                  "Where to write translations (default, or -: stdout; not a file it reads: the input, the checkpoint, "
                  "a vocabulary)");
  cmd->add_option("--vocab", opt->vocab,
                  "SentencePiece model, the source side's if not joint (default: the one the checkpoint holds, which "
                  "one given must equal)");
  cmd->add_option("--vocab-tgt", opt->vocab_tgt,
                  "Target-side SentencePiece model of a run with one vocabulary per language (default: the one the "
                  "checkpoint holds, which one given must equal)");
  auto* beam = add_whole_number_option(cmd, "--beam", opt->beam, 1, 1000,
                                       "Beam size (default: decode.beam of the checkpoint's config)");
  auto* length_penalty =
      cmd->add_option("--length-penalty", opt->length_penalty, "Length penalty alpha (default: from the config)")
          ->check(finite_range(0.0, 10.0));
  add_whole_number_option(cmd, "--batch", opt->batch, 1, 100000,
                          "Sentences decoded together (default: from the config)");
  auto* nbest = add_whole_number_option(
      cmd, "--nbest", opt->nbest, 1, 1000,
      "Write the N best translations of each sentence (1 to the beam size), one a line: 'LINE ||| "
      "translation ||| F0= log-probability ||| score' (LINE from 0; score: the length-normalized "
      "log-probability the beam ranks by), as Marian and Moses write n-best lists");
  auto* sample = cmd->add_flag("--sample", opt->sample,
                               "Draw each token from the model's distribution instead of searching (one translation "
                               "a sentence, for back-translation): the same seed gives the same draws, under mpirun "
                               "too (across --batch sizes, but for last-bit differences of the probabilities)")
                     ->excludes(beam)
                     ->excludes(nbest)
                     ->excludes(length_penalty);
  add_whole_number_option(cmd, "--top-k", opt->sampling.top_k, 0, std::int64_t{1} << 30,
                          "--sample: only from the K most likely tokens (0: all)")
      ->needs(sample);
  cmd->add_option("--temperature", opt->sampling.temperature,
                  "--sample: divides the log-probabilities (below 1: closer to greedy; above 1: more diverse)")
      ->check(finite_range(1e-3, 1e3))
      ->capture_default_str()
      ->needs(sample);
  add_whole_number_option(cmd, "--seed", opt->seed, 0, std::numeric_limits<std::int64_t>::max(),
                          "--sample: seed of the draws")
      ->needs(sample);
  cmd->add_option("--device", opt->device,
                  "Decode on the cpu or on a GPU (cuda: the first GPU; under mpirun, local rank % GPUs)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  return {cmd, [opt] {
            // Under mpirun the ranks share the sentences (each translates a share of the batches)
            // and rank 0 writes all the translations.
            std::unique_ptr<dist::MpiCommunicator> world;
            if (launched_by_mpi()) world = dist::MpiCommunicator::world();
            const bool root = world == nullptr || world->rank() == 0;
            if (opt->input == "-") opt->input.clear();  // standard input, as score's --hyp -
            // Counted: under an MPMD launch some ranks may have -i and others not.
            if (world != nullptr && world->size() > 1 && dist::count_ranks(opt->input.empty(), world.get()) > 0)
              throw EveryRankError(
                  "translate under mpirun: give the sentences with -i FILE (mpirun passes standard input to rank 0 "
                  "only)");
            if (opt->output == "-") opt->output.clear();  // standard output, the default
            if (root && !opt->output.empty()) {
              std::vector<std::pair<const char*, std::string>> inputs = {{"the input", opt->input},
                                                                         {"the --vocab file", opt->vocab},
                                                                         {"the --vocab-tgt file", opt->vocab_tgt}};
              for (const std::string& c : opt->checkpoints) inputs.emplace_back("the checkpoint", c);
              check_writable_output(opt->output, inputs);
            }
            const Device device = opt->device == "cuda" ? Device::cuda : Device::cpu;
            TranslationJob job = load_translation_job(
                world.get(), opt->checkpoints, opt->vocab, opt->vocab_tgt, device,
                opt->input.empty() ? std::string("standard input") : fmt::format("input file '{}'", opt->input),
                [&] { return opt->input.empty() ? read_stdin_lines() : data::read_lines(opt->input); });
            const Translator& translator = *job.translator;
            // The vocabulary files an older checkpoint's translator found by itself (no option named them).
            if (root && !opt->output.empty())
              for (const std::string& file : translator.vocabulary_files())
                check_not_an_input(opt->output, {{"the vocabulary file", file}});
            const io::Config& cfg = translator.config();
            models::DecodeOptions dec = decode_options(cfg);
            if (opt->beam > 0) dec.beam = opt->beam;
            if (opt->length_penalty >= 0) dec.length_penalty = opt->length_penalty;
            if (opt->sample) {
              dec.sampling = opt->sampling;
              dec.sampling->seed = static_cast<std::uint64_t>(opt->seed);
            }
            const std::int64_t batch = opt->batch > 0 ? opt->batch : cfg.integer("decode.batch_sentences");
            check_same_decoding(dec, batch, opt->nbest, world.get());
            const std::vector<std::string> out_lines =
                opt->nbest > 0 ? nbest_lines(translator, job.sources, dec, opt->nbest, opt->beam, batch, world.get())
                               : translator.translate(job.sources, dec, batch, world.get());
            if (!root) return 0;
            write_translations(opt->output, out_lines);
            return 0;
          }};
}

}  // namespace tessera::launch
