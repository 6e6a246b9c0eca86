// The middleware pipeline: synchronous outcomes are used at once, a pending
// step resumes the walk after it, and the first reply ends the walk.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gateway/session/pipeline.hpp"

namespace http = boost::beast::http;
using namespace sluice;

namespace {

// A step that answers as told and records that it ran.
class Step final : public Middleware {
 public:
  Step(std::string name, MiddlewareStep step, std::vector<std::string>& ran)
      : name_(std::move(name)), step_(step), ran_(ran) {}
  MiddlewareResult on_request(RequestContext& ctx, MiddlewareLater& later) override {
    ran_.push_back(name_);
    ctx.response_headers.emplace_back("X-Step", name_);
    switch (step_) {
      case MiddlewareStep::kContinue:
        return MiddlewareResult::next();
      case MiddlewareStep::kRespond: {
        LocalReply reply;
        reply.status = 418;
        return MiddlewareResult::respond(std::move(reply));
      }
      case MiddlewareStep::kPending:
        done = later.take();
        return MiddlewareResult::pending();
    }
    return MiddlewareResult::next();
  }
  MiddlewareDone done;

 private:
  std::string name_;
  MiddlewareStep step_;
  std::vector<std::string>& ran_;
};

struct Later final : MiddlewareLater {
  MiddlewareDone take() override {
    ++taken;
    return [](std::optional<LocalReply>) {};
  }
  int taken = 0;
};

}  // namespace

TEST_CASE("synchronous steps run in order with nothing taken", "[pipeline]") {
  std::vector<std::string> ran;
  MiddlewareChain chain;
  chain.steps.push_back(std::make_shared<Step>("a", MiddlewareStep::kContinue, ran));
  chain.steps.push_back(std::make_shared<Step>("b", MiddlewareStep::kContinue, ran));
  Pipeline pipeline;
  Later later;
  sluice::HttpFields head;
  head.set("X-Api-Key", "k");
  auto& ctx = pipeline.begin(head);
  CHECK(ctx.header("x-api-key") == "k");
  CHECK(ctx.header_count("X-Api-Key") == 1);
  CHECK_FALSE(ctx.header("X-Other"));
  auto result = pipeline.advance(chain, later);
  CHECK(result.step == MiddlewareStep::kContinue);
  CHECK(ran == std::vector<std::string>{"a", "b"});
  CHECK(later.taken == 0);
  HeaderList got{{"Stale", "x"}};
  pipeline.take_response_headers(got);
  CHECK(got.size() == 2);
  // The next request starts with none (the list handed back is forgotten).
  CHECK(pipeline.begin(head).response_headers.empty());
}

TEST_CASE("a reply ends the walk", "[pipeline]") {
  std::vector<std::string> ran;
  MiddlewareChain chain;
  chain.steps.push_back(std::make_shared<Step>("a", MiddlewareStep::kRespond, ran));
  chain.steps.push_back(std::make_shared<Step>("b", MiddlewareStep::kContinue, ran));
  Pipeline pipeline;
  Later later;
  sluice::HttpFields head;
  pipeline.begin(head);
  auto result = pipeline.advance(chain, later);
  REQUIRE(result.step == MiddlewareStep::kRespond);
  REQUIRE(result.reply);
  CHECK(result.reply->status == 418);
  CHECK(ran == std::vector<std::string>{"a"});
}

TEST_CASE("a pending step resumes after itself; a new request starts over", "[pipeline]") {
  std::vector<std::string> ran;
  MiddlewareChain chain;
  chain.steps.push_back(std::make_shared<Step>("a", MiddlewareStep::kPending, ran));
  chain.steps.push_back(std::make_shared<Step>("b", MiddlewareStep::kContinue, ran));
  Pipeline pipeline;
  Later later;
  sluice::HttpFields head;
  pipeline.begin(head);
  CHECK(pipeline.advance(chain, later).step == MiddlewareStep::kPending);
  CHECK(later.taken == 1);
  CHECK(pipeline.advance(chain, later).step == MiddlewareStep::kContinue);
  CHECK(ran == std::vector<std::string>{"a", "b"});

  auto& ctx = pipeline.begin(head);
  CHECK(ctx.response_headers.empty());
  CHECK(pipeline.advance(chain, later).step == MiddlewareStep::kPending);
  CHECK(ran == std::vector<std::string>{"a", "b", "a"});
}

TEST_CASE("the end hooks of a request run once, in order; a new request or the pipeline's end "
          "runs those left",
          "[pipeline]") {
  std::vector<std::string> ended;
  sluice::HttpFields head;
  {
    Pipeline pipeline;
    auto& ctx = pipeline.begin(head);
    ctx.on_end.emplace_back([&](const ExchangeEnd& e) { ended.push_back("a" + std::to_string(e.status)); });
    ctx.on_end.emplace_back([&](const ExchangeEnd& e) { ended.push_back("b" + std::to_string(e.status)); });
    pipeline.end({200, std::nullopt});
    pipeline.end({500, std::nullopt});  // already ended: nothing left to run
    CHECK(ended == std::vector<std::string>{"a200", "b200"});

    // A hook registered after the end (a decision that came back late) runs
    // when the next request begins...
    pipeline.context().on_end.emplace_back([&](const ExchangeEnd& e) {
      ended.push_back("late" + std::to_string(e.status));
    });
    pipeline.begin(head);
    CHECK(ended.back() == "late0");
    // ... or when the pipeline goes.
    pipeline.context().on_end.emplace_back([&](const ExchangeEnd&) { ended.push_back("last"); });
  }
  CHECK(ended.back() == "last");
  CHECK(ended.size() == 4);
}
