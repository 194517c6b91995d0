// The Backend of the HTTP front end over the engine child's Unix socket (EngineClient). The
// supervisor swaps the client when it restarts the engine; requests in flight on the old one end
// with an `unavailable` error, which the front end turns into an error event or a 503.
#pragma once

#include <memory>
#include <mutex>

#include "engine/client.h"
#include "gateway/backend.h"

namespace tandem::gateway {

class EngineBackend : public Backend {
 public:
  // Installs (or, with nullptr, removes) the engine connection new requests go to.
  void set_client(std::shared_ptr<engine::EngineClient> client);
  // Why the engine is about to go away (e.g. "worker box-b lost: ..."): added to the errors of the
  // requests it ends, which otherwise only know that the connection closed.
  void set_failure_reason(const std::string& why);
  std::shared_ptr<engine::EngineClient> client();

  Status submit(const GenerationRequest& request, EventSink sink) override;
  void cancel(const std::string& id) override;
  Result<std::vector<Token>> tokenize(const std::string& text, bool add_special) override;
  Result<std::string> detokenize(const std::vector<int32_t>& tokens) override;
  Result<Rendered> render(Endpoint endpoint, const nlohmann::json& body) override;

  // Converts one engine event to the front end's form (exposed for tests).
  static GenerationEvent convert(const engine::EngineEvent& e);

 private:
  std::mutex mutex_;
  std::shared_ptr<engine::EngineClient> client_;  // guarded by mutex_
  std::string reason_;                            // guarded by mutex_
};

}  // namespace tandem::gateway
