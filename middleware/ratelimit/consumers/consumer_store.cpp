#include "middleware/ratelimit/consumers/consumer_store.hpp"

#include <charconv>

namespace sluice {

extern const std::string_view kConsumerLookupScript;
extern const std::string_view kConsumerReadScript;
extern const std::string_view kConsumerPutScript;
extern const std::string_view kConsumerDeleteScript;
extern const std::string_view kConsumerListScript;

namespace {

using Reply = redis::Reply;

// The store's scripts, each made once (with its SHA1) on first use.
struct StoreScripts {
  redis::Script lookup{std::string(kConsumerLookupScript)};
  redis::Script read{std::string(kConsumerReadScript)};
  redis::Script put{std::string(kConsumerPutScript)};
  redis::Script remove{std::string(kConsumerDeleteScript)};
  redis::Script list{std::string(kConsumerListScript)};
};

const StoreScripts& store_scripts() {
  static const StoreScripts all;
  return all;
}

std::string error_text(std::error_code ec, const Reply& reply) {
  std::string text = ec.message();
  if (!reply.str.empty()) text += ": " + reply.str;
  return text;
}

bool is_text(const Reply& reply) {
  return reply.type == Reply::Type::kString || reply.type == Reply::Type::kStatus;
}

std::optional<std::int64_t> to_int(const Reply& reply) {
  if (reply.type == Reply::Type::kInteger) return reply.integer;
  if (!is_text(reply)) return std::nullopt;
  std::int64_t value = 0;
  const char* end = reply.str.data() + reply.str.size();
  const auto [ptr, ec] = std::from_chars(reply.str.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

// {doc, updated_at} at `first` of `elements`, as a consumer of `id`.
std::optional<StoredConsumer> consumer_at(const std::string& id, const std::vector<Reply>& elements,
                                          std::size_t first) {
  if (elements.size() < first + 2 || !is_text(elements[first])) return std::nullopt;
  const auto updated_at = to_int(elements[first + 1]);
  if (!updated_at) return std::nullopt;
  return parse_consumer_document(id, elements[first].str, *updated_at);
}

}  // namespace

std::string consumer_store_base(std::string_view key_prefix) {
  return std::string(key_prefix) + "{consumers}:";
}

std::string consumer_changes_channel(std::string_view key_prefix) {
  return consumer_store_base(key_prefix) + "changes";
}

ConsumerStore::ConsumerStore(redis::Client& client, std::string key_prefix)
    : client_(client), base_(consumer_store_base(key_prefix)) {}

void ConsumerStore::load_scripts() {
  const auto& all = store_scripts();
  for (const auto* script : {&all.lookup, &all.read, &all.put, &all.remove, &all.list}) {
    client_.load_script(*script);
  }
}

void ConsumerStore::lookup(const std::string& fingerprint,
                           std::function<void(ConsumerLookup)> done) {
  client_.evalsha(store_scripts().lookup, {base_ + "k:" + fingerprint}, {base_},
                  [done = std::move(done)](std::error_code ec, Reply reply) {
                    ConsumerLookup out;
                    if (ec) {
                      out.error = error_text(ec, reply);
                      return done(std::move(out));
                    }
                    if (reply.is_nil()) {
                      out.result = ConsumerLookup::Result::kUnknown;
                      return done(std::move(out));
                    }
                    out.result = ConsumerLookup::Result::kDamaged;
                    if (reply.type == Reply::Type::kArray && reply.elements.size() == 3 &&
                        is_text(reply.elements[0])) {
                      if (auto consumer = consumer_at(reply.elements[0].str, reply.elements, 1)) {
                        out.result = ConsumerLookup::Result::kFound;
                        out.consumer = std::make_shared<const StoredConsumer>(std::move(*consumer));
                      }
                    }
                    done(std::move(out));
                  });
}

void ConsumerStore::put(const StoredConsumer& consumer, std::function<void(ConsumerWrite)> done) {
  std::vector<std::string> args = {base_, consumer.id, consumer_document(consumer), consumer.plan,
                                   consumer.org};
  args.insert(args.end(), consumer.key_fingerprints.begin(), consumer.key_fingerprints.end());
  client_.evalsha(
      store_scripts().put, {base_ + "c:" + consumer.id}, std::move(args),
      [done = std::move(done)](std::error_code ec, Reply reply) {
        ConsumerWrite out;
        if (ec) {
          out.error = error_text(ec, reply);
          if (ec == redis::Error::kTimeout || ec == redis::Error::kConnectionLost ||
              ec == redis::Error::kClosed) {
            out.result = ConsumerWrite::Result::kUnknown;
          }
          return done(std::move(out));
        }
        if (reply.type != Reply::Type::kArray || reply.elements.size() < 2 ||
            !is_text(reply.elements[0])) {
          out.error = "unexpected reply from the store's script";
          return done(std::move(out));
        }
        const std::string& what = reply.elements[0].str;
        const auto number = to_int(reply.elements[1]);
        if (what == "conflict" && number && *number >= 1) {
          out.result = ConsumerWrite::Result::kConflict;
          out.conflict_index = static_cast<std::size_t>(*number - 1);
        } else if (number && (what == "created" || what == "replaced" || what == "unchanged")) {
          out.result = what == "created"    ? ConsumerWrite::Result::kCreated
                       : what == "replaced" ? ConsumerWrite::Result::kReplaced
                                            : ConsumerWrite::Result::kUnchanged;
          out.updated_at_ms = *number;
          for (std::size_t i = 2; i < reply.elements.size(); ++i) {
            if (is_text(reply.elements[i])) out.changed.push_back(reply.elements[i].str);
          }
        } else {
          out.error = "unexpected reply from the store's script";
        }
        done(std::move(out));
      });
}

void ConsumerStore::read(const std::string& id, std::function<void(ConsumerRead)> done) {
  client_.evalsha(store_scripts().read, {base_ + "c:" + id}, {},
                  [id, done = std::move(done)](std::error_code ec, Reply reply) {
                    ConsumerRead out;
                    if (ec) {
                      out.error = error_text(ec, reply);
                      return done(std::move(out));
                    }
                    if (reply.is_nil()) {
                      out.result = ConsumerRead::Result::kNotFound;
                      return done(std::move(out));
                    }
                    out.result = ConsumerRead::Result::kDamaged;
                    if (reply.type == Reply::Type::kArray && reply.elements.size() == 2) {
                      out.consumer = consumer_at(id, reply.elements, 0);
                      if (out.consumer) out.result = ConsumerRead::Result::kFound;
                    }
                    done(std::move(out));
                  });
}

void ConsumerStore::remove(const std::string& id, std::function<void(ConsumerRemoval)> done) {
  client_.evalsha(store_scripts().remove, {base_ + "c:" + id}, {base_, id},
                  [done = std::move(done)](std::error_code ec, Reply reply) {
                    ConsumerRemoval out;
                    if (ec) {
                      out.error = error_text(ec, reply);
                      return done(std::move(out));
                    }
                    if (reply.type != Reply::Type::kArray || reply.elements.empty() ||
                        reply.elements[0].type != Reply::Type::kInteger) {
                      out.error = "unexpected reply from the store's script";
                      return done(std::move(out));
                    }
                    out.ok = true;
                    out.existed = reply.elements[0].integer == 1;
                    for (std::size_t i = 1; i < reply.elements.size(); ++i) {
                      if (is_text(reply.elements[i])) out.changed.push_back(reply.elements[i].str);
                    }
                    done(std::move(out));
                  });
}

void ConsumerStore::list(const std::string& plan, const std::string& org, const std::string& cursor,
                         std::size_t count,
                         std::function<void(ConsumerPage)> done) {
  const std::string set = !org.empty()    ? base_ + "org:" + org
                          : !plan.empty() ? base_ + "plan:" + plan
                                          : base_ + "ids";
  client_.evalsha(store_scripts().list, {set}, {base_, cursor, std::to_string(count)},
                  [count, done = std::move(done)](std::error_code ec, Reply reply) {
                    ConsumerPage page;
                    if (ec) {
                      page.error = error_text(ec, reply);
                      return done(std::move(page));
                    }
                    if (reply.type != Reply::Type::kArray || reply.elements.size() % 3 != 0) {
                      page.error = "unexpected reply from the store's script";
                      return done(std::move(page));
                    }
                    page.ok = true;
                    const auto& e = reply.elements;
                    for (std::size_t i = 0; i < e.size(); i += 3) {
                      if (!is_text(e[i])) continue;
                      if (auto consumer = consumer_at(e[i].str, e, i + 1)) {
                        page.consumers.push_back(std::move(*consumer));
                      }
                    }
                    // A full page may have more after it; its last id is the cursor.
                    if (e.size() / 3 == count && !e.empty() && is_text(e[e.size() - 3])) {
                      page.next_cursor = e[e.size() - 3].str;
                    }
                    done(std::move(page));
                  });
}

}  // namespace sluice
