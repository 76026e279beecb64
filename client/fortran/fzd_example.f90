! fzd_example.f90 - compresses a real(4) 2-D field through fzd, decompresses
! it, and checks every value against the error bound.  The daemon is the one
! at the default address ($FZD_SOCKET, else fzd's usual sockets); where none
! answers, the module runs the same jobs in process.  Exits with status 0
! when the round trip kept the bound, 1 otherwise.
program fzd_example
  use, intrinsic :: iso_c_binding
  use fzclient
  implicit none
  integer, parameter :: nx = 300, ny = 200
  real(c_float), allocatable :: field(:, :), back(:, :)
  integer(c_int8_t), allocatable :: archive(:)
  integer(c_size_t) :: bound, archive_len
  real(c_double) :: eb_abs, max_err
  real(c_double), parameter :: eb = 1.0d-3
  type(c_ptr) :: client
  character(len=256) :: msg
  integer :: st, i, j

  allocate(field(nx, ny), back(nx, ny))
  do j = 1, ny
    do i = 1, nx
      field(i, j) = real(sin(0.05d0 * i) * cos(0.03d0 * j) * 100.0d0, c_float)
    end do
  end do

  ! No daemon is no failure: client stays c_null_ptr and the jobs run in
  ! process.  (A program that needs the daemon stops here instead, or calls
  ! fz_require_daemon_f(.true.).)
  st = fz_client_connect_f(client, '', msg)
  if (st /= 0) print '(3a)', 'fzd_example: no daemon (', trim(msg), '): compressing in process'

  st = fz_compress_bound_f('f32', shape(field), 'balanced', eb, 'rel', bound)
  if (st /= 0) call fail('compress_bound', st, '')
  allocate(archive(bound))

  st = fz_compress_f32(client, field, shape(field), 'balanced', eb, 'rel', archive, &
                       archive_len, eb_abs)
  if (st /= 0) then
    call fz_client_errmsg_f(client, msg)
    call fail('compress', st, msg)
  end if

  st = fz_decompress_f32(client, archive, archive_len, back, size(back))
  if (st /= 0) then
    call fz_client_errmsg_f(client, msg)
    call fail('decompress', st, msg)
  end if
  call fz_client_close_f(client)

  max_err = maxval(abs(real(field, c_double) - real(back, c_double)))
  print '(a, i0, a, i0, a, f8.2, a, es10.3, a, es10.3, 2a)', 'fzd_example: ', nx * ny * 4, &
    ' bytes -> ', archive_len, ' (ratio ', real(nx * ny * 4, c_double) / real(archive_len, c_double), &
    '), max error ', max_err, ', bound ', eb_abs, ', ', &
    trim(merge('in process ', 'through fzd', fz_in_process_f()))
  if (eb_abs <= 0 .or. max_err > eb_abs) then
    print '(a)', 'fzd_example: the error bound was not kept'
    stop 1
  end if
  deallocate(field, back, archive)

contains

  subroutine fail(what, code, why)
    character(len=*), intent(in) :: what, why
    integer, intent(in) :: code
    character(len=128) :: text
    call fz_strerror_f(code, text)
    print '(5a)', 'fzd_example: ', what, ': ', trim(text), merge(': ' // trim(why), '        ', &
      len_trim(why) > 0)
    stop 1
  end subroutine
end program fzd_example
