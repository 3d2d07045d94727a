#include "dist/device_communicator.h"

namespace tessera::dist {

DeviceCommunicator::DeviceCommunicator(std::unique_ptr<MpiCommunicator> mpi)
    : mpi_(std::move(mpi)), nccl_(std::make_unique<NcclCommunicator>(*mpi_)) {}

std::unique_ptr<Communicator> DeviceCommunicator::split(int color, int key) {
  std::unique_ptr<Communicator> sub = mpi_->split(color, key);
  return std::make_unique<DeviceCommunicator>(
      std::unique_ptr<MpiCommunicator>(static_cast<MpiCommunicator*>(sub.release())));
}

}  // namespace tessera::dist
