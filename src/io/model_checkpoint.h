// Any model stretch holds (a Model, src/model/config.h: read from a llama2.c file, a GGUF file, a
// Hugging Face folder or a checkpoint) written as a stretch checkpoint, the safetensors file that
// `stretch train` writes (src/train/checkpoint.h) and src/io/stretch_checkpoint.h reads: what
// ReadCheckpointHeader and LoadCheckpointModel give back is the same model, every weight bit for
// bit, the same config and attention layout, step 0.
//
// The file holds
//   tensors   every parameter LoadCheckpointModel reads for the architecture, F32, under its
//             ModelWeights::ForEach name, the model's floats as they are. KERPLE's a_h, b_h on
//             layers without position are written as zeros: the trainer keeps them on every layer
//             of a KERPLE model and no layer without position reads them (InferenceModel drops
//             them again). "train.step" U64 [] = 0. "tokenizer.model" U8: the tokenizer's
//             serialized SentencePiece model, when it has one.
//   metadata  stretch.format, stretch.version; stretch.config = ArchToJson of the model's
//             architecture (a layout without per-layer entries is written with one
//             {position, full attention} entry per layer, as the reader requires; the RoPE base
//             as it is, with no NTK factor: a base NTK once resolved is a base like any other);
//             stretch.tokenizer = {"kind", "vocab_size", "bos"}, as the trainer writes it, when
//             there is a tokenizer; stretch.converted_from = Model::source (where it came from).
// Nothing pretends the model was trained here: no stretch.train (the trainer's options), no
// optimizer or batch-stream state (optim.*, rng.*). LoadCheckpointModel needs none of them;
// resuming a run from the file is refused for their lack.
//
// Refused with stretch::Error, naming the output, the field, what was found and what was expected
// (nothing is written then):
//   - a config the reader's checks refuse (ValidateArch: dim < 2, an odd head dim, kv heads not
//     dividing heads, seq_len < 2, a RoPE interpolation below 1 or on a model without RoPE, ...)
//     or an attention layout ValidateAttentionLayout refuses (non-finite KERPLE or SSMax
//     parameters, ...);
//   - a config field that stretch.config would read back otherwise (a self-check: the file must
//     say what the model is);
//   - a weight missing or of the wrong size, or one the architecture has no place for (a
//     classifier with shared_classifier, a layer of the other block, KERPLE parameters on a model
//     without KERPLE): it would be lost;
//   - a tokenizer whose vocabulary size is not the model's, or a llama2.c vocabulary that
//     SentencePiece would encode otherwise than llama2.c does (SerializeSentencePieceModel's
//     reasons);
//   - `path` naming an input: the model's file (the path Model::source begins with, or a file in
//     that folder for a Hugging Face folder) or the tokenizer's file. A caller with other inputs
//     checks them with CheckOutputPaths (src/io/output_file.h).
// Written atomically (SafetensorsWriter::Write): `path` holds the whole file or what it held
// before. A checkpoint has no place for a position method (a GGUF file's rope scaling): the
// caller decides what to do with one.
#pragma once

#include <string>

#include "src/io/tokenizer/tokenizer.h"
#include "src/io/tokenizer/training_tokenizer.h"
#include "src/model/config.h"

namespace stretch {

// With a llama2.c tokenizer (src/io/tokenizer/tokenizer.h): stored as kind "sentencepiece", the model
// SerializeSentencePieceModel writes, so that the checkpoint's tokenizer encodes valid UTF-8
// text to the ids tokenizer->Encode(text, false, false) gives. nullptr: no tokenizer is stored.
void SaveModelAsCheckpoint(const Model& model, const std::string& path, const Tokenizer* tokenizer);

// With a tokenizer stretch trains or a checkpoint carries (a CheckpointModel's, so that a
// checkpoint read and written again keeps it): stored as its kind and model, as the trainer
// stores it.
void SaveModelAsCheckpoint(const Model& model, const std::string& path,
                           const TrainingTokenizer& tokenizer);

}  // namespace stretch
