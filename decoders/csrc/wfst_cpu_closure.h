// The epsilon closure of the WFST CPU references (1-best wfst_cpu.cpp, streaming wfst_stream_cpu.cpp, lattice
// wfst_lattice_cpu.cpp): one implementation, so the three cannot drift apart.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace beamdec {
namespace wfst_cpu {

struct ClosureStats {
  int64_t cands = 0;       // candidates generated over every pass
  int32_t passes_with_cands = 0;  // passes that generated any candidate (the GPU's closure passes with work)
  bool converged = true;   // false: tokens still had epsilon arcs to relax after the last pass
};

// Jacobi passes over the epsilon arcs of `tokens` (the header comment of wfst_cpu.cpp): a pass reads the scores of
// the tokens the previous pass improved (the first pass: every token with epsilon arcs), in ascending token index,
// before it updates any; each candidate above `cutoff` adds a token for its destination or improves it (strictly
// greater score, so a tie keeps the earlier candidate). After the pass, `commit(token, prev, arc)` runs for every
// improved token in ascending index with its last winning candidate (`prev`: `tag_of` of the source token as the
// candidate read it, e.g. its word link), and only improved tokens with epsilon arcs stay for the next pass.
// `slot_of_state` (state -> token index, -1 absent) covers `tokens` on entry and on exit. Tok: .state, .score.
template <typename Tok, typename ArcScore, typename TagOf, typename Commit>
ClosureStats jacobi_epsilon_closure(std::vector<Tok>& tokens, float cutoff, int32_t passes, const int32_t* eps_begin,
                                    const int32_t* final_begin, const int32_t* dest,
                                    std::vector<int32_t>& slot_of_state, ArcScore arc_score, TagOf tag_of,
                                    Commit commit) {
  struct Cand {
    int32_t dest;
    float end;
    int32_t prev;
    int32_t arc;
  };
  auto has_eps_arcs = [&](int32_t s) { return eps_begin[s] < final_begin[s]; };
  ClosureStats stats;
  std::vector<int32_t> dirty, new_dirty, win_of;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (has_eps_arcs(tokens[i].state)) dirty.push_back(static_cast<int32_t>(i));
  std::vector<Cand> cands;
  std::vector<char> is_dirty;
  std::vector<std::pair<int32_t, int32_t>> win;  // per improved token: its winning (prev, arc) of this pass
  for (int32_t pass = 0; pass < passes && !dirty.empty(); ++pass) {
    cands.clear();
    for (int32_t i : dirty) {  // scores read before any update of this pass (Jacobi)
      const Tok tok = tokens[i];
      for (int32_t a = eps_begin[tok.state]; a < final_begin[tok.state]; ++a) {
        const float end = tok.score + arc_score(a);
        if (end > cutoff) cands.push_back({dest[a], end, tag_of(tok), a});
      }
    }
    stats.cands += static_cast<int64_t>(cands.size());
    if (!cands.empty()) ++stats.passes_with_cands;
    new_dirty.clear();
    win.clear();
    is_dirty.assign(tokens.size(), 0);
    win_of.assign(tokens.size(), -1);
    for (const Cand& c : cands) {
      int32_t j = slot_of_state[c.dest];
      if (j < 0) {
        j = static_cast<int32_t>(tokens.size());
        slot_of_state[c.dest] = j;
        Tok fresh{};
        fresh.state = c.dest;
        tokens.push_back(fresh);
        is_dirty.push_back(0);
        win_of.push_back(-1);
      } else if (!(c.end > tokens[j].score)) {
        continue;
      }
      tokens[j].score = c.end;
      if (!is_dirty[j]) {
        is_dirty[j] = 1;
        new_dirty.push_back(j);
        win_of[j] = static_cast<int32_t>(win.size());
        win.push_back({c.prev, c.arc});
      } else {
        win[win_of[j]] = {c.prev, c.arc};
      }
    }
    std::sort(new_dirty.begin(), new_dirty.end());
    dirty.clear();
    for (int32_t j : new_dirty) {
      commit(tokens[j], win[win_of[j]].first, win[win_of[j]].second);
      if (has_eps_arcs(tokens[j].state)) dirty.push_back(j);  // only these have anything to relax
    }
  }
  stats.converged = dirty.empty();
  return stats;
}

}  // namespace wfst_cpu
}  // namespace beamdec
