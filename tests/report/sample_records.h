// A small, made-up set of lab records for the report tests: two models trained at L=128, two
// methods each, every protocol. The numbers are smooth functions of the cell, not measurements.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "src/report/records.h"

namespace stretch::testing {

inline LabRecord SampleCell(const std::string& model, const std::string& method,
                            const std::string& protocol, int64_t ctx, double quality) {
  LabRecord r;
  r.corpus = "sotu";
  r.model = model;
  r.variant = model + " | full";
  r.train_len = 128;
  r.method = method;
  r.resolved_method = method;
  r.protocol = protocol;
  r.ctx = ctx;
  r.sequences = 4;
  r.tokens = 4 * ctx;
  const double beyond = std::log2(static_cast<double>(ctx) / 128.0);  // 0 at L
  r.loss = 2.0 + (1.0 - quality) * beyond;
  r.accuracy = std::max(0.02, 0.5 - 0.1 * (1.0 - quality) * beyond);
  r.token_accuracy = r.accuracy;
  for (int64_t b = 0; b < ctx; b += ctx / 8) {
    const double over = b + ctx / 16 > 128 ? std::log2((b + ctx / 16) / 128.0) : 0.0;
    r.by_position.push_back({b, b + ctx / 8, 4 * ctx / 8,
                             2.5 - 0.003 * std::min<int64_t>(b, 128) + (1 - quality) * over,
                             r.accuracy});
  }
  r.seconds = 0.5;
  r.key = LabRecordKey(r);
  return r;
}

// Models "rope" and "alibi"; methods "direct" and "self-extend:group=8,window=128" (a real spec,
// whose ':' ',' '=' do not belong in file names).
inline std::vector<LabRecord> SampleRecords() {
  std::vector<LabRecord> out;
  const std::vector<std::pair<std::string, double>> models = {{"rope", 0.0}, {"alibi", 0.6}};
  const std::vector<std::pair<std::string, double>> methods = {
      {"direct", 0.0}, {"self-extend:group=8,window=128", 0.3}};
  for (const auto& [model, mq] : models) {
    for (const auto& [method, q] : methods) {
      const double quality = std::min(1.0, mq + q);
      for (const int64_t ctx : {128, 512, 1024}) {
        out.push_back(SampleCell(model, method, "nonrepeat", ctx, quality));
        if (ctx > 128) out.push_back(SampleCell(model, method, "repeat", ctx, quality + 0.2));
      }
      for (const int64_t ctx : {128, 256, 512, 1024}) {
        LabRecord r = SampleCell(model, method, "tail", ctx, quality);
        r.tail = 64;
        r.loss = 2.2 - 0.05 * quality * std::log2(ctx / 128.0) + 0.1 * (1 - quality);
        r.by_position.clear();
        r.key = LabRecordKey(r);
        out.push_back(r);
      }
      for (const int64_t ctx : {256, 512}) {
        for (const double depth : {0.0, 0.5, 1.0}) {
          LabRecord r = SampleCell(model, method, "passkey", ctx, quality);
          r.depth = depth;
          r.sequences = 10;
          r.accuracy = std::min(1.0, quality + 0.2 * depth) * (ctx == 256 ? 1.0 : 0.8);
          r.by_position.clear();
          r.key = LabRecordKey(r);
          out.push_back(r);
        }
      }
      LabRecord r = SampleCell(model, method, "sliding", 1024, quality);
      r.stride = 256;
      r.key = LabRecordKey(r);
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace stretch::testing
