// The copy readout's keys in a training log (JSON lines, one record per step or evaluation):
// written by the trainer (src/train/run.cc), read back by LastCopyReadout (the lab's "trained
// already" stages) and by the report's training curves (src/report/train_curves.cc). Each KEY
// holds a share in [0, 1], KEY_n its count of predictions, and KEY_n_eff, where written, the
// effective count of correlated rows (Proportion::EffectiveN, src/train/copy_data.h).
#pragma once

namespace stretch::train_log {

inline constexpr const char* kCopy = "copy_accuracy";
inline constexpr const char* kCopyControl = "copy_control";
inline constexpr const char* kTextcopy = "textcopy_accuracy";
inline constexpr const char* kTextcopyControl = "textcopy_control";
inline constexpr const char* kRandcopy = "randcopy_accuracy";
inline constexpr const char* kRandcopyControl = "randcopy_control";
inline constexpr const char* kPasskeyDigits = "passkey_digits";
inline constexpr const char* kPasskeyKeys = "passkey_keys";

}  // namespace stretch::train_log
