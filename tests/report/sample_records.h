// A small, made-up set of lab records for the report tests: two models trained at L=128, two
// methods each, every protocol. The numbers are smooth functions of the cell, not measurements.
#pragma once

#include <algorithm>
#include <array>
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
    const double loss = 2.5 - 0.003 * std::min<int64_t>(b, 128) + (1 - quality) * over;
    r.by_position.push_back({b, b + ctx / 8, 4 * ctx / 8, loss, r.accuracy,
                             LabInterval{true, loss - 0.05, loss + 0.05},
                             LabInterval{true, r.accuracy - 0.01, r.accuracy + 0.01}});
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

// A made-up lab with every retrieval protocol, 95% intervals and controls, where the answer is
// known: model "copier" passes the copy gate; its methods are "yarn" and "rerope" (both keep
// distant information, their intervals overlapping: a tie), "window" (non-repeat as at L,
// retrieval at control: it only avoids blowing up) and "pi" (non-repeat falls, retrieval at
// control: neither). Model "forgetter" fails the gate: its retrieval cells are not informative.
// L = 128, tested at 1024; far copy of text from 32, 256 and 896 tokens back; repeat with
// periods 128 (within window) and 512; passkey at 3 depths, 20 trials each.
inline LabRecord WithCi(LabRecord r, double accuracy, double half) {
  r.accuracy = accuracy;
  r.token_accuracy = accuracy;
  r.accuracy_ci = {true, std::max(0.0, accuracy - half), std::min(1.0, accuracy + half)};
  r.loss_ci = {true, r.loss - 0.05, r.loss + 0.05};
  r.key = LabRecordKey(r);
  return r;
}

inline LabRecord WithControl(LabRecord r, double control, double half) {
  r.has_control = true;
  r.control_accuracy = control;
  r.control_loss = 4.0;
  r.control_accuracy_ci = {true, std::max(0.0, control - half), std::min(1.0, control + half)};
  return r;
}

struct RetrievalLab {
  std::vector<LabRecord> records;
  std::vector<LabGate> gates;
};

inline RetrievalLab SampleRetrievalLab() {
  struct Method {
    std::string name;
    double nonrepeat_long;      // non-repeat accuracy at 1024 (0.50 at L)
    double repeat_long;         // repeat, period 512
    std::array<double, 3> far;  // far copy at distances 32, 256, 896
    double passkey;             // passkey at every depth
  };
  const std::vector<Method> methods = {{"yarn", 0.47, 0.80, {0.70, 0.68, 0.62}, 0.60},
                                       {"rerope", 0.48, 0.82, {0.72, 0.70, 0.66}, 0.65},
                                       {"window", 0.50, 0.47, {0.70, 0.04, 0.04}, 0.0},
                                       {"pi", 0.20, 0.21, {0.30, 0.05, 0.03}, 0.0}};
  const std::string reason = "copy - control = 3 points < 20 at L";
  RetrievalLab lab;
  for (const std::string model : {"copier", "forgetter"}) {
    const bool informative = model == "copier";
    for (const Method& m : methods) {
      if (!informative && (m.name == "rerope" || m.name == "pi")) continue;
      auto retrieval = [&](LabRecord r) {
        r.informative = informative;
        if (!informative) r.not_informative = reason;
        r.key = LabRecordKey(r);
        return r;
      };
      lab.records.push_back(WithCi(SampleCell(model, m.name, "nonrepeat", 128, 0.5), 0.50, 0.02));
      lab.records.push_back(
          WithCi(SampleCell(model, m.name, "nonrepeat", 1024, 0.5), m.nonrepeat_long, 0.02));
      LabRecord within = SampleCell(model, m.name, "repeat", 1024, 0.5);
      within.period = 128;
      lab.records.push_back(WithControl(WithCi(within, 0.90, 0.02), m.nonrepeat_long, 0.03));
      LabRecord beyond = SampleCell(model, m.name, "repeat", 1024, 0.5);
      beyond.period = 512;
      lab.records.push_back(retrieval(
          WithControl(WithCi(beyond, m.repeat_long, 0.05), m.nonrepeat_long - 0.01, 0.03)));
      const int64_t distances[] = {32, 256, 896};
      for (size_t k = 0; k < 3; ++k) {
        LabRecord far = SampleCell(model, m.name, "far-copy", 1024, 0.5);
        far.distance = distances[k];
        far.material = "text";
        far.by_position.clear();
        lab.records.push_back(retrieval(WithControl(WithCi(far, m.far[k], 0.03), 0.03, 0.025)));
      }
      for (const double depth : {0.0, 0.5, 1.0}) {
        LabRecord pk = SampleCell(model, m.name, "passkey", 1024, 0.5);
        pk.depth = depth;
        pk.sequences = 20;
        pk.by_position.clear();
        lab.records.push_back(retrieval(WithControl(WithCi(pk, m.passkey, 0.2), 0.0, 0.08)));
      }
    }
    LabGate g;
    g.corpus = "sotu";
    g.model = model;
    g.model_id = informative ? "00000000000000aa" : "00000000000000bb";
    g.train_len = 128;
    g.copy_accuracy = informative ? 0.93 : 0.06;
    g.copy_ci = {true, g.copy_accuracy - 0.03, g.copy_accuracy + 0.03};
    g.control_accuracy = 0.03;
    g.control_ci = {true, 0.01, 0.05};
    g.copy_trials = 64;
    g.passkey_accuracy = informative ? 0.95 : 0.0;
    g.passkey_ci = {true, std::max(0.0, g.passkey_accuracy - 0.1),
                    std::min(1.0, g.passkey_accuracy + 0.04)};
    g.passkey_trials = 60;
    g.passed = informative;
    g.reason = informative ? "" : reason;
    lab.gates.push_back(g);
  }
  return lab;
}

}  // namespace stretch::testing
