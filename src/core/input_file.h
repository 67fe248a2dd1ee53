// The one rule for every file stretch reads, in every subcommand: text and corpora, lab records,
// models, tokenizers, --config files, token lists.
//
//   - A regular file, or a symlink to one, is read.
//   - Anything else is refused by name before a byte is read: a character device (/dev/zero never
//     ends, so a reader that reads to the end fills memory), a FIFO (open() blocks until a writer
//     comes, so the command hangs with nothing said), a socket, a block device, a directory where a
//     file is expected.
//
// No input takes a pipe: every reader either needs the file's size before it reads (the binary
// formats check every count against it) or reads the file more than once (sniffing by content,
// then parsing; a corpus is fingerprinted, then read). A user with text on a pipe writes it to a
// file first; the message says what was expected.
//
//   "/dev/zero: a character device, not a regular file: expected a text file or a directory of
//    *.txt files"
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace stretch {

// What `path` is, in words for messages: "a regular file", "a directory", "a character device",
// "a block device", "a FIFO", "a socket", "a special file"; "" when nothing is there. Symlinks are
// followed (a broken one is "").
std::string InputKindOf(const std::string& path);

// Throws stretch::Error unless `path` names a regular file (after symlinks):
//   "<path>: no such file: expected <expected>"
//   "<path>: a FIFO, not a regular file: expected <expected>"
// It only looks (stat), never opens. `expected` says what the reader wants ("a llama2.c
// tokenizer file"); `flag`, when given, goes before the path ("--data /dev/zero: ..."): the
// commands check each input flag this way before any work, the readers below check again.
void CheckRegularInput(const std::string& path, std::string_view expected,
                       std::string_view flag = {});

// The same for inputs that may also be a directory (a corpus: a text file or a directory of
// *.txt files). Returns true for a directory, false for a regular file; throws otherwise.
bool CheckRegularInputOrDirectory(const std::string& path, std::string_view expected,
                                  std::string_view flag = {});

// A file opened for reading under the rule above, without a race between looking and opening:
// the open cannot block (O_NONBLOCK: a FIFO swapped in after a check is not waited on) and the
// kind is checked on the opened descriptor before any read.
class InputFile {
 public:
  // Throws as CheckRegularInput for a path that is there but not a regular file, else
  // "<path>: cannot open for reading: <the system's reason>".
  InputFile(const std::string& path, std::string_view expected);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;
  InputFile(const InputFile&) = delete;
  ~InputFile();

  int fd() const { return fd_; }
  int64_t size() const { return size_; }  // the file's size when it was opened
  // Hands the descriptor over (the caller closes it); this object is then empty.
  int Release();
  // The same as a stdio stream.
  std::FILE* ReleaseAsStream();

 private:
  int fd_ = -1;
  int64_t size_ = 0;
};

// A whole regular file's bytes. Throws as InputFile, "<path>: <size> bytes: expected <expected>
// of at most <max_bytes> bytes" for a larger one, or "<path>: read error: <reason>".
std::string ReadInputFile(const std::string& path, std::string_view expected,
                          int64_t max_bytes = INT64_MAX);

// At most `n` bytes from the start of `path`, for telling file kinds apart by content; "" when
// the path is not a regular file or cannot be read (the reader that follows says why).
std::string ReadInputHead(const std::string& path, int64_t n);

}  // namespace stretch
